package storetest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// A client that goes away halfway through a request body (a gateway killed
// with -9, a cut connection) must not take the store down with it: dynalite
// alone rethrows that error and exits.
func TestServerSurvivesAbortedRequest(t *testing.T) {
	s, err := Start()
	if err != nil {
		unavailable(t, err)
	}
	defer s.Stop()

	db := Client(t, s.Endpoint)
	// Each round's ListTables also notices a crash caused by the round
	// before it, whichever the server handled first.
	for i := range 3 {
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.Endpoint, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		// Promise 1,000 bytes of body, send 10, hang up.
		fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.0\r\n"+
			"X-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Length: 1000\r\n\r\n{\"Limit\":1")
		conn.Close()
		if _, err := db.ListTables(context.Background(), &dynamodb.ListTablesInput{}); err != nil {
			t.Fatalf("store gone after aborted request %d: %v", i+1, err)
		}
	}
}
