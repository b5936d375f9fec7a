package auth

import (
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// KeyItem writes what ParseItem reads back.
func TestKeyItemRoundTrip(t *testing.T) {
	created := time.Date(2025, 3, 4, 5, 6, 7, 0, time.FixedZone("x", 3600))
	for _, k := range []*Key{
		{Hash: HashKey("a-key-for-the-test"), Servers: []string{"*"}},
		{Hash: HashKey("another-key-for-the-test"), Name: "ci", Servers: []string{"a", "b"}, Tools: []string{"a/echo", "b/*"}, MaxParallel: 3, RPMLimit: 60},
		{Hash: HashKey("a-third-key-for-the-test"), Servers: []string{"a"}, Tools: []string{}},
	} {
		item := KeyItem(k, created)
		got, err := ParseItem(item)
		if err != nil {
			t.Fatalf("%+v: %v", k, err)
		}
		if !reflect.DeepEqual(got, k) {
			t.Errorf("read back %+v, wrote %+v", got, k)
		}
		if c, _ := item[AttrCreated].(*types.AttributeValueMemberS); c == nil || c.Value != "2025-03-04T04:06:07Z" {
			t.Errorf("created_at = %#v", item[AttrCreated])
		}
	}
	if _, ok := KeyItem(&Key{Hash: "h"}, time.Time{})[AttrCreated]; ok {
		t.Error("a zero created time is written")
	}
}
