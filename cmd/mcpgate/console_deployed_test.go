package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"

	"github.com/mcpgate/mcpgate/internal/secret/secrettest"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// TestConsoleDeployed runs mcpgate console as against a deployed stack,
// with CloudWatch Logs and STS from moto_server: it acts as the caller
// identity STS returns, shows the request records of the log group on
// its Calls screen, and writes its audit records to the group's
// mcpgate-console-audit stream, where a filter on msg = "audit" finds them.
func TestConsoleDeployed(t *testing.T) {
	env := storetest.NewEnv(t)
	moto := secrettest.Shared(t)
	testkit.PutServer(t, env, map[string]any{"server_id": "demo", "url": "https://example.com/mcp", "max_concurrent_requests": 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cw := cloudwatchlogs.NewFromConfig(moto.Config(), func(o *cloudwatchlogs.Options) { o.BaseEndpoint = aws.String(moto.Endpoint) })
	group := "/aws/lambda/mcpgate-" + strings.ToLower(t.Name())
	if _, err := cw.CreateLogGroup(ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String(group)}); err != nil {
		t.Fatal(err)
	}
	if _, err := cw.CreateLogStream(ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: aws.String(group), LogStreamName: aws.String("gw")}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	line := `{"time":"` + now.UTC().Format(time.RFC3339Nano) + `","level":"INFO","msg":"request","request_id":"req-from-cloudwatch","status":429,"duration_ms":3,"principal":"key:1a2b3c4d5e6f","server_id":"demo","tool":"echo","code":"AT_CAPACITY"}`
	if _, err := cw.PutLogEvents(ctx, &cloudwatchlogs.PutLogEventsInput{LogGroupName: aws.String(group), LogStreamName: aws.String("gw"),
		LogEvents: []cwtypes.InputLogEvent{{Message: aws.String(line), Timestamp: aws.Int64(now.UnixMilli())}}}); err != nil {
		t.Fatal(err)
	}

	v := vars(env)
	v["AWS_ENDPOINT_URL_STS"] = moto.Endpoint
	v["AWS_ENDPOINT_URL_CLOUDWATCH_LOGS"] = moto.Endpoint
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"console", "--log-group", group}, strings.NewReader(""), pw, io.Discard, func(k string) string { return v[k] })
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var who, url string
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "http://") {
			url = l
			break
		} else {
			who = l
		}
	}
	go io.Copy(io.Discard, pr)
	if !strings.Contains(who, "acting as arn:aws:") {
		t.Fatalf("console said %q; want it to act as the STS caller's ARN", who)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	base := strings.Split(url, "/?")[0]
	if resp, err := c.Get(url); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Get(base + "/live/calls")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "req-from-cloudwatch") && strings.Contains(string(b), "AT_CAPACITY") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Calls screen never showed the log group's record:\n%s", b)
		}
		time.Sleep(300 * time.Millisecond)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/servers/demo/pause", strings.NewReader("seconds=30"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("pause: %v %v", resp, err)
	}
	resp.Body.Close()
	out, err := cw.FilterLogEvents(ctx, &cloudwatchlogs.FilterLogEventsInput{LogGroupName: aws.String(group), FilterPattern: aws.String(`{ $.msg = "audit" }`)})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range out.Events {
		m := aws.ToString(e.Message)
		found = found || strings.Contains(m, `"action":"pause"`) && strings.Contains(m, `"operator":"arn:aws:`) && aws.ToString(e.LogStreamName) == "mcpgate-console-audit"
	}
	if !found {
		t.Errorf("no audit record of the pause, naming the STS caller, in the log group's audit stream: %+v", out.Events)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("console exited %d; want 0", code)
	}
}
