package upstream

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// oneByte reads one byte at a time, splitting events everywhere.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 1)]) }

func TestEventTapRelaysInOrder(t *testing.T) {
	stream := "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":1,\"message\":\"one\"}}\r\n\r\n" +
		": comment\n\n" +
		"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\n" +
		"data: \"params\":{\"level\":\"info\",\"data\":\"log\"}}\n\n" +
		"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
	for _, chunked := range []bool{false, true} {
		var got []string
		l := &Listener{
			Progress: func(_ context.Context, p *mcp.ProgressNotificationParams) { got = append(got, "progress:"+p.Message) },
			Log:      func(_ context.Context, p *mcp.LoggingMessageParams) { got = append(got, "log:"+p.Data.(string)) },
		}
		var r io.Reader = strings.NewReader(stream)
		if chunked {
			r = oneByte{r}
		}
		tap := &eventTap{rc: io.NopCloser(r), l: l, ctx: context.Background()}
		var passed strings.Builder
		buf := make([]byte, 7)
		for {
			n, err := tap.Read(buf)
			passed.Write(buf[:n])
			if strings.Contains(passed.String(), `"result"`) && len(got) < 2 {
				t.Fatalf("chunked=%v: the result reached the reader before the notifications were relayed (%v)", chunked, got)
			}
			if err == io.EOF {
				break
			}
		}
		if passed.String() != stream {
			t.Errorf("chunked=%v: the tap changed the stream", chunked)
		}
		if strings.Join(got, ",") != "progress:one,log:log" {
			t.Errorf("chunked=%v: relayed %v", chunked, got)
		}
	}
}
