package demoupstream

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// The demo's plain HTTP API, described by its OpenAPI document at
// /openapi.json: the same instrument as slow_tool, for OpenAPI-backed
// servers (retry_after: answered 429 with that Retry-After). /api/fail
// always answers 500 (an unwell backend).

// OpenAPIDocument is the API's OpenAPI 3.0 document. Its server is
// relative, so it resolves against wherever the document was fetched.
const OpenAPIDocument = `{
  "openapi": "3.0.3",
  "info": {"title": "demo-api", "version": "1.0.0"},
  "servers": [{"url": "/api"}],
  "paths": {
    "/slow": {
      "get": {
        "operationId": "slow_api",
        "summary": "Sleeps, then reports how many calls were in flight when it started and the peak seen so far.",
        "parameters": [
          {"name": "ms", "in": "query", "schema": {"type": "integer", "minimum": 0}},
          {"name": "until_in_flight", "in": "query", "schema": {"type": "integer", "minimum": 0}},
          {"name": "gate", "in": "query", "schema": {"type": "string"}},
          {"name": "retry_after", "in": "query", "schema": {"type": "integer", "minimum": 0}}
        ],
        "responses": {"200": {"description": "the counters", "content": {"application/json": {"schema": {"type": "object"}}}}}
      }
    },
    "/echo": {
      "post": {
        "operationId": "echo_api",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
          "type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}}}},
        "responses": {"200": {"description": "the text", "content": {"application/json": {"schema": {"type": "object"}}}}}
      }
    },
    "/fail": {
      "get": {
        "operationId": "fail_api",
        "responses": {"500": {"description": "always"}}
      }
    }
  }
}`

func (d *Demo) apiRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(OpenAPIDocument))
	})
	mux.HandleFunc("GET /api/slow", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var in SlowArgs
		if v := q.Get("ms"); v != "" {
			ms, err := strconv.Atoi(v)
			if err != nil {
				http.Error(w, "ms must be an integer", http.StatusBadRequest)
				return
			}
			in.MS = &ms
		}
		in.UntilInFlight, _ = strconv.Atoi(q.Get("until_in_flight"))
		in.Gate = q.Get("gate")
		if n, _ := strconv.Atoi(q.Get("retry_after")); n > 0 && n <= maxRetryAfter {
			// A backend asking for a pause.
			w.Header().Set("Retry-After", strconv.Itoa(n))
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		res, err := d.hold(r.Context(), in, func(float64, string) {})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, res)
	})
	mux.HandleFunc("POST /api/echo", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Text string `json:"text"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&in); err != nil {
			http.Error(w, "body must be {\"text\": ...}", http.StatusBadRequest)
			return
		}
		writeJSON(w, in)
	})
	mux.HandleFunc("GET /api/fail", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "the backend failed on purpose", http.StatusInternalServerError)
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
