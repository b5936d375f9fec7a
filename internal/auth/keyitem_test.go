package auth

import (
	"errors"
	"reflect"
	"strings"
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
		{Hash: HashKey("a-fourth-key-for-the-test"), Servers: []string{"a"}, Team: "Data Science"},
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

// TestKeyTeam: a key's team is a string of 1 to MaxTeamLen bytes with no
// control or formatting character; any other value makes the key refused,
// naming the attribute, as a limit out of range does. The key's principal
// carries its team.
func TestKeyTeam(t *testing.T) {
	item := func(team types.AttributeValue) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{
			"key_hash":  &types.AttributeValueMemberS{Value: HashKey("a-key-for-the-team-test")},
			AttrServers: &types.AttributeValueMemberSS{Value: []string{"*"}},
			AttrTeam:    team,
		}
	}
	k, err := ParseItem(item(&types.AttributeValueMemberS{Value: "team-a"}))
	if err != nil || k.Team != "team-a" || k.Principal().Team != "team-a" {
		t.Fatalf("team-a: %+v, %v", k, err)
	}
	for name, v := range map[string]types.AttributeValue{
		"a number":        &types.AttributeValueMemberN{Value: "7"},
		"a set":           &types.AttributeValueMemberSS{Value: []string{"a"}},
		"empty":           &types.AttributeValueMemberS{Value: ""},
		"oversized":       &types.AttributeValueMemberS{Value: strings.Repeat("t", MaxTeamLen+1)},
		"a newline":       &types.AttributeValueMemberS{Value: "a\nb"},
		"a bidi override": &types.AttributeValueMemberS{Value: "a\u202eb"},
		"invalid UTF-8":   &types.AttributeValueMemberS{Value: "a\xffb"},
		"padded":          &types.AttributeValueMemberS{Value: "team "},
	} {
		k, err := ParseItem(item(v))
		var kie *KeyItemError
		if !errors.As(err, &kie) || !strings.Contains(err.Error(), "team: ") || k.Team != "" {
			t.Errorf("team %s: %v (team %q); want the item refused, naming team", name, err, k.Team)
		}
	}
}
