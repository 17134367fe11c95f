package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pipebackup/pipe/wal"
)

// fakeServer answers a replication connection as PostgreSQL does, with
// the settings and base backup archives a test gives it.
type fakeServer struct {
	settings map[string]string
	// archives are sent in order: name (or "" for the manifest) and data.
	archives [][2]string
	// tablespaces are announced before the data directory: OID and
	// location.
	tablespaces [][2]string
	// extra is sent inside the copy after the archives (hostile servers).
	extra []pgproto3.BackendMessage
	// dies: after the archives the server is terminated while it sends a
	// message, as a backend blocked writing is: half the message, then
	// the connection closes with no error.
	dies bool
	// damaged: the server found pages whose checksum failed; it warns of
	// each as it reads them and, after the end position, ends with
	// data_corrupted, as PostgreSQL does.
	damaged []string
	// archiver, when set, answers pg_stat_archiver's last archived file,
	// one answer per look (the last repeats); without it the query
	// fails, as on a server whose pg_hba.conf allows only replication.
	archiver []string
	mu       sync.Mutex
	looks    int      // the looks at pg_stat_archiver
	commands []string // the BASE_BACKUP commands received
}

// archived is the fake archiver's answer to one look.
func (f *fakeServer) archived() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.looks++
	return f.archiver[min(f.looks, len(f.archiver))-1]
}

func (f *fakeServer) serve(t *testing.T, conn net.Conn) {
	defer conn.Close()
	be := pgproto3.NewBackend(conn, conn)
	if _, err := be.ReceiveStartupMessage(); err != nil {
		return
	}
	send := func(msgs ...pgproto3.BackendMessage) {
		for _, m := range msgs {
			be.Send(m)
		}
		be.Flush()
	}
	row := func(cols []string, vals ...string) []pgproto3.BackendMessage {
		var fields []pgproto3.FieldDescription
		for _, c := range cols {
			fields = append(fields, pgproto3.FieldDescription{Name: []byte(c), DataTypeOID: 25})
		}
		var values [][]byte
		for _, v := range vals {
			values = append(values, []byte(v))
		}
		return []pgproto3.BackendMessage{&pgproto3.RowDescription{Fields: fields}, &pgproto3.DataRow{Values: values}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}}
	}
	send(&pgproto3.AuthenticationOk{}, &pgproto3.ParameterStatus{Name: "server_version", Value: f.settings["server_version"]},
		&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 2}}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	for {
		msg, err := be.Receive()
		if err != nil {
			return
		}
		q, ok := msg.(*pgproto3.Query)
		if !ok {
			return
		}
		switch {
		case strings.HasPrefix(q.String, "SHOW "):
			name := strings.TrimPrefix(q.String, "SHOW ")
			send(append(row([]string{name}, f.settings[name]), &pgproto3.ReadyForQuery{TxStatus: 'I'})...)
		case q.String == "IDENTIFY_SYSTEM":
			send(append(row([]string{"systemid", "timeline", "xlogpos", "dbname"}, "7301234567890123456", "1", "0/3000000", ""), &pgproto3.ReadyForQuery{TxStatus: 'I'})...)
		case q.String == archiveQuery && f.archiver != nil:
			send(append(row([]string{"last_archived_wal", "last_failed_wal", "last_failed_time"}, f.archived(), "", ""), &pgproto3.ReadyForQuery{TxStatus: 'I'})...)
		case strings.HasPrefix(q.String, "BASE_BACKUP"):
			f.mu.Lock()
			f.commands = append(f.commands, q.String)
			f.mu.Unlock()
			if f.serveOld(conn, send, row, q.String) { // 13 and 14
				continue
			}
			send(row([]string{"recptr", "tli"}, "0/2000028", "1")...)
			spaces := []pgproto3.BackendMessage{&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("spcoid")}, {Name: []byte("spclocation")}, {Name: []byte("size")}}}}
			for _, ts := range f.tablespaces {
				spaces = append(spaces, &pgproto3.DataRow{Values: [][]byte{[]byte(ts[0]), []byte(ts[1]), nil}})
			}
			send(append(spaces, &pgproto3.DataRow{Values: [][]byte{nil, nil, nil}}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})...)
			send(&pgproto3.CopyOutResponse{})
			for _, a := range f.archives {
				if a[0] == "" {
					send(&pgproto3.CopyData{Data: []byte("m")})
				} else {
					send(&pgproto3.CopyData{Data: []byte("n" + a[0] + "\x00\x00")})
				}
				for b := []byte(a[1]); len(b) > 0; {
					n := min(len(b), 7) // split across messages
					if len(a[1]) > 1<<20 {
						n = min(len(b), 32<<10)
					}
					send(&pgproto3.CopyData{Data: append([]byte("d"), b[:n]...)})
					b = b[n:]
				}
			}
			send(f.extra...)
			if f.dies {
				_, _ = conn.Write([]byte{'d', 0, 0, 0x10, 0, 'd', 'h', 'a', 'l', 'f'})
				return
			}
			for _, w := range f.damaged {
				send(&pgproto3.NoticeResponse{Severity: "WARNING", Code: "01000", Message: w})
			}
			send(&pgproto3.CopyDone{})
			send(row([]string{"recptr", "tli"}, "0/2000100", "1")...)
			if len(f.damaged) > 0 {
				send(&pgproto3.NoticeResponse{Severity: "WARNING", Code: "01000", Message: fmt.Sprintf("%d total checksum verification failures", len(f.damaged))},
					&pgproto3.ErrorResponse{Severity: "ERROR", Code: "XX001", Message: "checksum verification failure during base backup"}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
				continue
			}
			send(&pgproto3.CommandComplete{CommandTag: []byte("BASE_BACKUP")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
		default:
			send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "42601", Message: "unexpected " + q.String}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
		}
	}
}

// fakeSource is a BaseSource connected to f.
func fakeSource(t *testing.T, f *fakeServer) *BaseSource {
	t.Helper()
	s := &BaseSource{c: baseConfig{Checkpoint: "fast", Label: "pipe", Checksums: "CRC32C"}, conn: conn{info: "host=fake user=pipe"}}
	s.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		a, b := net.Pipe()
		go f.serve(t, b)
		return a, nil
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func goodSettings() map[string]string {
	return map[string]string{"server_version_num": "150004", "server_version": "15.4", "wal_level": "replica", "archive_mode": "on", "wal_segment_size": "16MB", "data_checksums": "off"}
}

func TestBaseSourceSplitsTheCopy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := fakeSource(t, &fakeServer{settings: goodSettings(), archives: [][2]string{{"base.tar", "the data directory"}, {"", `{"manifest": 1}`}}})
	infos, err := s.Streams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Name != "base.tar" || infos[1].Name != "backup_manifest" {
		t.Fatalf("streams %+v", infos)
	}
	facts, _ := s.Describe(ctx)
	if facts["start_lsn"] != "0/2000028" || facts["system_identifier"] != "7301234567890123456" || facts["wal_segment_size"] != "16777216" || facts["timeline"] != "1" {
		t.Errorf("facts %v", facts)
	}
	for _, want := range [][2]string{{"base.tar", "the data directory"}, {"backup_manifest", `{"manifest": 1}`}} {
		r, err := s.Open(ctx, want[0])
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil || string(got) != want[1] {
			t.Errorf("%s: %q %v", want[0], got, err)
		}
	}
	end, err := s.Conclude(ctx)
	if err != nil || end["stop_lsn"] != "0/2000100" || end["stop_timeline"] != "1" || end["stop_time"] == "" {
		t.Errorf("conclude: %v %v", end, err)
	}
	if _, err := s.Open(ctx, "base.tar"); err == nil {
		t.Error("a stream of the copy was opened twice")
	}
	// The catalog reads the WAL range from these facts, under its own
	// spelling of their names.
	for k, v := range end {
		facts[k] = v
	}
	r, ok, err := wal.BackupRange(facts)
	if first, last := r.Names(); !ok || err != nil || first != "000000010000000000000002" || last != "000000010000000000000002" {
		t.Errorf("the catalog reads the range %s … %s (%v %v) from %v", first, last, ok, err, facts)
	}
}

// TestBaseSourceRecordsTablespaces records where each tablespace was, so
// that a restore can say by OID where it goes.
func TestBaseSourceRecordsTablespaces(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := fakeSource(t, &fakeServer{settings: goodSettings(), tablespaces: [][2]string{{"16385", "/srv/fast ts"}, {"16386", "/srv/odd\nname"}},
		archives: [][2]string{{"16385.tar", "one"}, {"16386.tar", "two"}, {"base.tar", "the data directory"}, {"", "{}"}}})
	infos, err := s.Streams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 4 || infos[0].Name != "16385.tar" || infos[1].Name != "16386.tar" {
		t.Fatalf("streams %+v", infos)
	}
	facts, _ := s.Describe(ctx)
	if facts["tablespaces"] != "16385,16386" || facts["tablespace_16385"] != "/srv/fast ts" {
		t.Errorf("facts %v", facts)
	}
	if v, ok := facts["tablespace_16386"]; ok { // a manifest holds no control character
		t.Errorf("a location with a line feed became the fact %q", v)
	}
}

func TestBaseSourceRefuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct{ setting, value, want string }{
		{"server_version_num", "120022", "PostgreSQL 13 to 18"},
		{"server_version_num", "190001", "a newer pipe"},
		{"wal_level", "minimal", "wal_level = replica"},
		{"archive_mode", "off", "archive_mode = on"},
	} {
		set := goodSettings()
		set[tc.setting] = tc.value
		if tc.setting == "server_version_num" {
			set["server_version"] = tc.value[:2] + ".1"
		}
		_, err := fakeSource(t, &fakeServer{settings: set}).Streams(ctx)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s = %s: %v, want %q", tc.setting, tc.value, err, tc.want)
		}
	}
	// A server that sends an archive it did not announce, or garbage in
	// the copy: the streams fail, and so does the run's end.
	for name, f := range map[string]*fakeServer{
		"unannounced": {settings: goodSettings(), archives: [][2]string{{"16385.tar", "x"}}},
		"garbage":     {settings: goodSettings(), archives: [][2]string{{"base.tar", "x"}}, extra: []pgproto3.BackendMessage{&pgproto3.CopyData{Data: []byte("zzz")}}},
		"error": {settings: goodSettings(), archives: [][2]string{{"base.tar", "x"}},
			extra: []pgproto3.BackendMessage{&pgproto3.ErrorResponse{Severity: "ERROR", Code: "58P01", Message: "could not open file"}}},
	} {
		s := fakeSource(t, f)
		if _, err := s.Streams(ctx); err != nil {
			t.Fatal(err)
		}
		var errs []string
		for _, st := range []string{"base.tar", "backup_manifest"} {
			r, _ := s.Open(ctx, st)
			if _, err := io.ReadAll(r); err != nil {
				errs = append(errs, err.Error())
			}
		}
		_, err := s.Conclude(ctx)
		if err == nil || len(errs) == 0 {
			t.Errorf("%s: streams %v, conclude %v: want failures", name, errs, err)
		}
	}
}

// A backend terminated mid-message sends no error: the stream's error
// says what that means instead of pgx's bare "unexpected EOF".
func TestBaseSourceServerDies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := fakeSource(t, &fakeServer{settings: goodSettings(), archives: [][2]string{{"base.tar", "the data directory"}}, dies: true})
	if _, err := s.Streams(ctx); err != nil {
		t.Fatal(err)
	}
	r, _ := s.Open(ctx, "base.tar")
	_, err := io.ReadAll(r)
	if err == nil || !strings.Contains(err.Error(), "server closed the connection unexpectedly") || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("stream: %v", err)
	}
	if _, err := s.Conclude(ctx); err == nil || !strings.Contains(err.Error(), "backend terminated") {
		t.Errorf("conclude: %v", err)
	}
}

func TestBaseSourceCloseStopsAWaitingCopy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// More than the pipe and the copy's batch hold.
	s := fakeSource(t, &fakeServer{settings: goodSettings(), archives: [][2]string{{"base.tar", strings.Repeat("data no one reads ", 4<<20/18)}, {"", "{}"}}})
	if _, err := s.Streams(ctx); err != nil {
		t.Fatal(err)
	}
	// One byte read: the copy is now blocked writing the rest (the pipe
	// and its batch are full).
	r, _ := s.Open(ctx, "base.tar")
	if _, err := r.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close waited for a copy whose streams no one reads")
	}
	if _, err := s.Conclude(ctx); err == nil {
		t.Error("a stopped backup concluded")
	}
}

// A page whose checksum failed: the server sends everything, warns of
// the page, and ends with data_corrupted after the end position. Every
// stream reads whole, and Conclude returns the end position with the
// damage in the server's words; a data_corrupted error before the end
// position fails the backup.
func TestBaseSourceKeepsADamagedBackup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bad := `checksum verification failed in file "./base/5/16397", block 3: calculated 9D3B but expected 1F2C`
	s := fakeSource(t, &fakeServer{settings: goodSettings(), archives: [][2]string{{"base.tar", "the data directory"}, {"", "{}"}}, damaged: []string{bad}})
	if _, err := s.Streams(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"base.tar", "backup_manifest"} {
		r, err := s.Open(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	end, err := s.Conclude(ctx)
	if err != nil {
		t.Fatalf("a damaged backup failed: %v", err)
	}
	if end["stop_lsn"] != "0/2000100" || !strings.Contains(end["damage"], bad) || !strings.Contains(end["damage"], "checksum verification failure during base backup") {
		t.Errorf("conclude: %v", end)
	}

	// data_corrupted before the end position: nothing to recover to.
	s = fakeSource(t, &fakeServer{settings: goodSettings(), archives: [][2]string{{"base.tar", "x"}},
		extra: []pgproto3.BackendMessage{&pgproto3.ErrorResponse{Severity: "ERROR", Code: "XX001", Message: "checksum verification failure during base backup"}}})
	if _, err := s.Streams(ctx); err != nil {
		t.Fatal(err)
	}
	r, _ := s.Open(ctx, "base.tar")
	_, _ = io.ReadAll(r)
	if _, err := s.Conclude(ctx); err == nil || !strings.Contains(err.Error(), "checksum verification failure") {
		t.Errorf("data_corrupted inside the copy: %v", err)
	}
}
