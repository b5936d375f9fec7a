package openapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/openapi"
)

func Example() {
	// A stand-in for the HTTP API the document describes.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"path": %q}`, r.URL.Path)
	}))
	defer api.Close()

	ctx := context.Background()
	a, err := openapi.Load(ctx, openapi.Source{Path: "testdata/petstore.yaml"}, openapi.Options{BaseURL: api.URL + "/v1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, tool := range a.Tools() {
		fmt.Println("tool:", tool.Name)
	}
	for _, s := range a.Skipped() {
		fmt.Printf("skipped %s: %s\n", s.Op, s.Reason)
	}

	res, err := a.Call(ctx, "getPet", json.RawMessage(`{"petId": "7"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	fmt.Println(res.StructuredContent)

	_, err = a.Call(ctx, "getPet", json.RawMessage(`{"id": "7"}`))
	fmt.Println(err)
	// Output:
	// tool: listPets
	// tool: createPet
	// tool: getPet
	// tool: deletePet
	// tool: updatePet
	// tool: searchPets
	// skipped POST /pets/{petId}/photo: no operationId
	// skipped GET /stores/{storeId}/inventory: operationId "store inventory" is not a valid MCP tool name (use 1 to 128 of A-Z a-z 0-9 _ . -)
	// skipped POST /uploads: request body types multipart/form-data: only JSON request bodies are supported
	// {"path": "/v1/pets/7"}
	// map[path:/v1/pets/7]
	// tool "getPet": invalid arguments: argument "id": unknown argument (known: fields, petId); argument "petId": required path parameter is missing
}
