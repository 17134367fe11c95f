package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"
)

// receiver NAME [ok|hang|503]: serve HTTP for the rest of the script at
// $NAME_URL, appending a line per request to NAME.log ("PATH EVENT
// PIPELINE ok=OK id=ID") and its body to NAME.bodies; hang never answers,
// 503 always refuses.
func cmdReceiver(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: receiver NAME [ok|hang|503]")
	}
	name, mode := args[0], "ok"
	if len(args) == 2 {
		mode = args[1]
	}
	var mu sync.Mutex
	logf, err := os.Create(ts.MkAbs(name + ".log"))
	ts.Check(err)
	bodies, err := os.Create(ts.MkAbs(name + ".bodies"))
	ts.Check(err)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode {
		case "hang":
			select {
			case <-stop:
			case <-r.Context().Done():
			}
			return
		case "503":
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var ev struct {
			Kind     string `json:"event"`
			Pipeline string `json:"pipeline"`
			OK       bool   `json:"ok"`
			ID       string `json:"id"`
		}
		_ = json.Unmarshal(b, &ev)
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(logf, "%s %s %s ok=%v id=%s\n", r.URL.Path, ev.Kind, ev.Pipeline, ev.OK, ev.ID)
		bodies.Write(append([]byte(strings.TrimSpace(string(b))), '\n'))
	}))
	ts.Setenv(strings.ToUpper(name)+"_URL", srv.URL)
	ts.Defer(func() {
		close(stop)
		srv.Close()
		logf.Close()
		bodies.Close()
	})
}
