package store

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestItemSize(t *testing.T) {
	item := map[string]types.AttributeValue{
		"limiter_key": &types.AttributeValueMemberS{Value: "demo"},       // 11 + 4
		"ttl":         &types.AttributeValueMemberN{Value: "1767312000"}, // 3 + 5 (7 digits once trailing zeros go)
		"leases": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{ // 6 + 3
			"abcdefgh.1": &types.AttributeValueMemberN{Value: "1767312000123"}, // 10 + 7+1 + 1
		}},
		"ok": &types.AttributeValueMemberBOOL{Value: true}, // 2 + 1
	}
	if got, want := ItemSize(item), 15+8+9+19+3; got != want {
		t.Errorf("ItemSize = %d, want %d", got, want)
	}
	for _, c := range []struct {
		n    string
		want int
	}{{"0", 1}, {"7", 2}, {"12", 2}, {"123", 3}, {"-1200", 2}, {"0.005", 2}, {"1.5e10", 2}} {
		if got := numberSize(c.n); got != c.want {
			t.Errorf("numberSize(%q) = %d, want %d", c.n, got, c.want)
		}
	}
	for _, c := range []struct{ size, want int }{{0, 1}, {1024, 1}, {1025, 2}, {10 << 10, 10}} {
		if got := WriteUnits(c.size); got != c.want {
			t.Errorf("WriteUnits(%d) = %d, want %d", c.size, got, c.want)
		}
	}
}
