package testkit

import "testing"

func TestRecords(t *testing.T) {
	logs := `{"msg":"starting"}
panic: not a record
{"msg":"request","status":400,"code":"BAD_REQUEST","request_id":"a"}
{"msg":"request","status":200,"request_id":"b"}
`
	if got := len(Records(logs)); got != 3 {
		t.Errorf("%d records, want 3", got)
	}
	if got := Records(logs, Match{"msg": "request"}, Match{"status": "400"}); len(got) != 1 || Str(got[0], "code") != "BAD_REQUEST" {
		t.Errorf("request records with status 400: %v", got)
	}
	if rec, ok := Record(logs, Match{"msg": "request", "request_id": "b"}); !ok || Str(rec, "code") != "" {
		t.Errorf("record b: %v %v", rec, ok)
	}
	if _, ok := Record(logs, Match{"code": ""}); ok {
		t.Error("a missing field matched the empty string")
	}
}
