package storetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
)

// A failed conditional write answers with the item when asked, as DynamoDB
// does, and without it when the switch is off, as dynalite alone does.
func TestFailedConditionReturnsTheItem(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("ccfItem=%v", on), func(t *testing.T) {
			s, err := StartWith(on)
			if err != nil {
				unavailable(t, err)
			}
			defer s.Stop()
			db := Client(t, s.Endpoint)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tables := store.Tables{Servers: "srv", Leases: "lse", Keys: "key"}
			if _, err := tables.CreateTables(ctx, db); err != nil {
				t.Fatal(err)
			}
			key := map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: "x"}}
			put := func(mode types.ReturnValuesOnConditionCheckFailure) error {
				_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
					TableName: aws.String(tables.Leases), Key: key,
					UpdateExpression:                    aws.String("SET n = :one"),
					ConditionExpression:                 aws.String("attribute_not_exists(n)"),
					ExpressionAttributeValues:           map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
					ReturnValuesOnConditionCheckFailure: mode,
				})
				return err
			}
			if err := put(types.ReturnValuesOnConditionCheckFailureAllOld); err != nil {
				t.Fatal(err)
			}
			for _, mode := range []types.ReturnValuesOnConditionCheckFailure{types.ReturnValuesOnConditionCheckFailureAllOld, "NONE", ""} {
				var ccf *types.ConditionalCheckFailedException
				if err := put(mode); !errors.As(err, &ccf) {
					t.Fatalf("%q: err = %v, want a failed condition", mode, err)
				}
				n, _ := ccf.Item["n"].(*types.AttributeValueMemberN)
				want := on && mode == types.ReturnValuesOnConditionCheckFailureAllOld
				if got := n != nil && n.Value == "1"; got != want {
					t.Errorf("%q: item returned = %v (%v), want %v", mode, got, ccf.Item, want)
				}
			}
		})
	}
}

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
