package registry

import (
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"
)

// TestAttributeTableDrivesParse: every attribute of the table is read by
// Parse (its example gives a different Server than the item without it),
// and a name the table does not list is refused, named, with the table's
// names as the known ones.
func TestAttributeTableDrivesParse(t *testing.T) {
	plain, err := itemFromJSONString(`{"server_id": "demo", "url": "https://demo.example/mcp"}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range Attributes() {
		t.Run(a.Name, func(t *testing.T) {
			var ex map[string]any
			if err := json.Unmarshal([]byte(a.Example), &ex); err != nil {
				t.Fatalf("example %s: %v", a.Example, err)
			}
			if _, ok := ex[a.Name]; !ok {
				t.Fatalf("example %s does not use %s", a.Example, a.Name)
			}
			doc := map[string]any{"server_id": "demo", "url": "https://demo.example/mcp"}
			maps.Copy(doc, ex)
			raw, _ := json.Marshal(doc)
			_, srv, err := ItemFromJSON(raw)
			if err != nil {
				t.Fatalf("example %s is refused: %v", raw, err)
			}
			if reflect.DeepEqual(srv, plain) && a.Name != "server_id" && a.Name != "url" {
				t.Errorf("%s: Parse ignored it: same server as without it", a.Name)
			}
			if a.Type == "" || a.Doc == "" {
				t.Errorf("%s: no type or doc for help", a.Name)
			}
			for _, f := range a.Fields {
				if f.Type == "" || f.Doc == "" {
					t.Errorf("%s.%s: no type or doc for help", a.Name, f.Name)
				}
			}
		})
	}

	_, err = Parse(with("max_concurent_requests", n("2")))
	if err == nil || !strings.Contains(err.Error(), "max_concurent_requests: unknown attribute (known: "+strings.Join(KnownAttributes(), ", ")) {
		t.Errorf("a misspelt attribute: %v", err)
	}
	for _, nested := range []struct{ attr, field string }{{"tools", "max_concurent"}, {"breaker", "treshold"}} {
		doc := `{"server_id": "demo", "url": "https://demo.example/mcp", "` + nested.attr + `": {"` + nested.field + `": 1}}`
		if nested.attr == "tools" {
			doc = `{"server_id": "demo", "url": "https://demo.example/mcp", "tools": {"t": {"` + nested.field + `": 1}}}`
		}
		if _, _, err := ItemFromJSON([]byte(doc)); err == nil || !strings.Contains(err.Error(), nested.field+": unknown attribute") {
			t.Errorf("%s.%s: %v", nested.attr, nested.field, err)
		}
	}
}

// itemFromJSONString parses a server definition given as a string.
func itemFromJSONString(doc string) (*Server, error) {
	_, s, err := ItemFromJSON([]byte(doc))
	return s, err
}
