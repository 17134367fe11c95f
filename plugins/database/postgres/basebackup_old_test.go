package postgres

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// serveOld answers BASE_BACKUP as PostgreSQL 13 and 14 do, when f's
// server_version_num is below 150000, and reports whether it did: the
// options without parentheses; then after the start position and the
// tablespaces, each archive in a COPY stream of its own (untagged bytes,
// a tar without its end), the manifest in one more, then the end
// position. A real 13 sends a notice between the data directory and the
// manifest ("all required WAL segments have been archived"); so does
// this one.
func (f *fakeServer) serveOld(conn net.Conn, send func(...pgproto3.BackendMessage), row func([]string, ...string) []pgproto3.BackendMessage, query string) bool {
	if f.settings["server_version_num"] >= "150000" {
		return false
	}
	if strings.HasPrefix(query, "BASE_BACKUP(") || strings.Contains(query, "CHECKPOINT") || !strings.Contains(query, "MANIFEST 'yes'") {
		send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "42601", Message: "syntax error: " + query}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
		return true
	}
	send(row([]string{"recptr", "tli"}, "0/2000028", "1")...)
	spaces := []pgproto3.BackendMessage{&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("spcoid")}, {Name: []byte("spclocation")}, {Name: []byte("size")}}}}
	for _, ts := range f.tablespaces {
		spaces = append(spaces, &pgproto3.DataRow{Values: [][]byte{[]byte(ts[0]), []byte(ts[1]), nil}})
	}
	send(append(spaces, &pgproto3.DataRow{Values: [][]byte{nil, nil, nil}}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})...)
	for _, a := range f.archives {
		if a[0] == "" {
			send(&pgproto3.NoticeResponse{Severity: "NOTICE", Code: "00000", Message: "all required WAL segments have been archived"})
		}
		send(&pgproto3.CopyOutResponse{})
		for b := []byte(a[1]); len(b) > 0; {
			n := min(len(b), 7) // split across messages
			send(&pgproto3.CopyData{Data: b[:n]})
			b = b[n:]
		}
		if a[0] == streamBase { // 13 warns of a damaged page as it reads it
			for _, w := range f.damaged {
				send(&pgproto3.NoticeResponse{Severity: "WARNING", Code: "01000", Message: w})
			}
		}
		send(&pgproto3.CopyDone{})
	}
	send(f.extra...)
	if f.dies {
		_, _ = conn.Write([]byte{'d', 0, 0, 0x10, 0, 'h', 'a', 'l', 'f'})
		conn.Close()
		return true
	}
	send(row([]string{"recptr", "tli"}, "0/2000100", "1")...)
	if len(f.damaged) > 0 { // after the end position, as from 15 on
		send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "XX001", Message: "checksum verification failure during base backup"}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
		return true
	}
	send(&pgproto3.CommandComplete{CommandTag: []byte("BASE_BACKUP")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	return true
}

func oldSettings(num, version string) map[string]string {
	s := goodSettings()
	s["server_version_num"], s["server_version"] = num, version
	return s
}

// openTar is a tar archive without its end, as a server before 15 sends
// one: a file.
func openTar(t *testing.T, name, body string) string {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Flush(); err != nil { // no Close: no end blocks
		t.Fatal(err)
	}
	return b.String()
}

// PostgreSQL 13 and 14 send each archive in a COPY stream of its own:
// each becomes its stream, a whole tar file (the end blocks the server
// leaves out added), and the manifest as sent.
func TestBaseSourceOldProtocol(t *testing.T) {
	for _, v := range [][2]string{{"130023", "13.23 (Debian 13.23-0+deb11u1)"}, {"140019", "14.19"}} {
		t.Run(v[1][:2], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ts, base := openTar(t, "PG_13_202007201/16384/16386", "a table in a tablespace"), openTar(t, "PG_VERSION", "13\n")
			manifest := `{"PostgreSQL-Backup-Manifest-Version": 1}`
			s := fakeSource(t, &fakeServer{settings: oldSettings(v[0], v[1]), tablespaces: [][2]string{{"16385", "/srv/ts"}},
				archives: [][2]string{{"16385.tar", ts}, {"base.tar", base}, {"", manifest}}})
			infos, err := s.Streams(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, in := range infos {
				names = append(names, in.Name)
			}
			if strings.Join(names, " ") != "16385.tar base.tar backup_manifest" {
				t.Fatalf("streams %v", names)
			}
			facts, _ := s.Describe(ctx)
			if facts["start_lsn"] != "0/2000028" || facts["tablespace_16385"] != "/srv/ts" || facts["server_version"] != v[1] {
				t.Errorf("facts %v", facts)
			}
			for _, want := range [][3]string{{"16385.tar", ts, "PG_13_202007201/16384/16386"}, {"base.tar", base, "PG_VERSION"}, {"backup_manifest", manifest, ""}} {
				r, err := s.Open(ctx, want[0])
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(r)
				if err != nil {
					t.Fatalf("%s: %v", want[0], err)
				}
				if want[2] == "" {
					if string(got) != want[1] {
						t.Errorf("%s: %q", want[0], got)
					}
					continue
				}
				// The server's bytes, then the two zero blocks that end a
				// tar file.
				if string(got) != want[1]+string(make([]byte, 1024)) {
					t.Errorf("%s: %d bytes, want the server's %d and 1024 zeros", want[0], len(got), len(want[1]))
				}
				tr := tar.NewReader(bytes.NewReader(got))
				if h, err := tr.Next(); err != nil || h.Name != want[2] {
					t.Errorf("%s: %v %v", want[0], h, err)
				}
				if _, err := tr.Next(); !errors.Is(err, io.EOF) {
					t.Errorf("%s: after its file: %v, not the end of the archive", want[0], err)
				}
			}
			end, err := s.Conclude(ctx)
			if err != nil || end["stop_lsn"] != "0/2000100" || end["stop_timeline"] != "1" {
				t.Errorf("conclude: %v %v", end, err)
			}
		})
	}
}

// An old server that fails, dies or sends what it did not announce fails
// the streams and the run's end with the server's words.
func TestBaseSourceOldProtocolFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	set := oldSettings("130023", "13.23")
	for name, tc := range map[string]struct {
		f    *fakeServer
		want string
	}{
		"error": {&fakeServer{settings: set, archives: [][2]string{{"base.tar", "x"}},
			extra: []pgproto3.BackendMessage{&pgproto3.ErrorResponse{Severity: "ERROR", Code: "58P01", Message: "could not open file"}}}, "the server stopped the base backup: ERROR: could not open file"},
		"dies":        {&fakeServer{settings: set, archives: [][2]string{{"base.tar", "x"}}, dies: true}, "server closed the connection unexpectedly"},
		"unannounced": {&fakeServer{settings: set, archives: [][2]string{{"16385.tar", "y"}, {"base.tar", "x"}, {"", "{}"}}}, "ending the base backup"},
		"short":       {&fakeServer{settings: set, archives: [][2]string{{"base.tar", "x"}}}, "after 1 of the 2 archives"},
	} {
		s := fakeSource(t, tc.f)
		if _, err := s.Streams(ctx); err != nil {
			t.Fatal(err)
		}
		// The manifest's stream fails too, unless the server sent it
		// whole (the unannounced archive came in its place).
		r, _ := s.Open(ctx, "backup_manifest")
		if _, err := io.ReadAll(r); name != "unannounced" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: the manifest's stream: %v, want %q", name, err, tc.want)
		}
		if _, err := s.Conclude(ctx); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: conclude: %v, want %q", name, err, tc.want)
		}
	}
}

// The server's warnings and errors reach the same two places from 13 on:
// a backup a 13 or 14 server ends with data_corrupted is kept, with the
// damage named, as from 15 on.
func TestBaseSourceOldProtocolKeepsADamagedBackup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bad := `checksum verification failed in file "./base/5/16397", block 3: calculated 9D3B but expected 1F2C`
	s := fakeSource(t, &fakeServer{settings: oldSettings("140019", "14.19"), archives: [][2]string{{"base.tar", "x"}, {"", "{}"}}, damaged: []string{bad}})
	if _, err := s.Streams(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"base.tar", "backup_manifest"} {
		r, _ := s.Open(ctx, name)
		if _, err := io.ReadAll(r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	end, err := s.Conclude(ctx)
	if err != nil || end["stop_lsn"] != "0/2000100" || !strings.Contains(end["damage"], bad) {
		t.Errorf("conclude: %v %v", end, err)
	}
}
