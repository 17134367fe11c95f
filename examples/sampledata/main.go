// Command sampledata writes a deterministic folder of mixed files for the
// quickstart and tests: CSV-like table dumps with random text, JSON
// documents, a few random (incompressible) binaries, an empty file and
// nested folders. The same seed always gives the same bytes.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
)

func main() {
	out := flag.String("out", "examples/data", "folder to write")
	scale := flag.Int("mb", 24, "about how many MiB to write")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	r := rand.New(rand.NewPCG(*seed, 42))
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	total := int64(*scale) << 20
	write := func(name string, n int64, gen func(w *bufio.Writer, n int64)) {
		p := filepath.Join(*out, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			log.Fatal(err)
		}
		f, err := os.Create(p)
		if err != nil {
			log.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		gen(w, n)
		if err := w.Flush(); err != nil {
			log.Fatal(err)
		}
		if err := f.Close(); err != nil {
			log.Fatal(err)
		}
	}
	rows := func(w *bufio.Writer, n int64) {
		for i := int64(0); int64(w.Buffered())+i*0 < n; i++ {
			fmt.Fprintf(w, "%d\t%s\t%d\t2026-%02d-%02d %02d:%02d:%02d\t%s\n", i, word(r, 6+r.IntN(10)), r.IntN(1_000_000),
				1+r.IntN(12), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), sentence(r, 3+r.IntN(12)))
			if w.Buffered() > 1<<19 {
				w.Flush()
				n -= 1 << 19
			}
		}
	}
	random := func(w *bufio.Writer, n int64) {
		b := make([]byte, 64<<10)
		for n > 0 {
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			k := min(n, int64(len(b)))
			w.Write(b[:k])
			n -= k
		}
	}
	json := func(w *bufio.Writer, n int64) {
		w.WriteString("[\n")
		for i := 0; int64(i*120) < n; i++ {
			fmt.Fprintf(w, `  {"id": %d, "name": %q, "tags": [%q, %q], "score": %.3f},`+"\n", i, word(r, 8), word(r, 4), word(r, 5), r.Float64()*100)
		}
		w.WriteString("  {}\n]\n")
	}
	write("tables/users.tsv", total*45/100, rows)
	write("tables/orders.tsv", total*30/100, rows)
	write("docs/catalog.json", total*10/100, json)
	write("blobs/photo.bin", total*10/100, random)
	for i := 0; i < 20; i++ {
		write(fmt.Sprintf("small/note-%02d.txt", i), int64(r.IntN(4000)), rows)
	}
	write("small/empty", 0, random)
	write("small/one-byte", 1, random)
}

func word(r *rand.Rand, n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz"
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[r.IntN(len(letters))]
	}
	return string(b)
}

func sentence(r *rand.Rand, words int) string {
	common := []string{"the", "order", "shipped", "customer", "payment", "pending", "refund", "invoice", "delivered", "address"}
	s := ""
	for i := 0; i < words; i++ {
		if i > 0 {
			s += " "
		}
		if r.IntN(3) == 0 {
			s += word(r, 3+r.IntN(8))
		} else {
			s += common[r.IntN(len(common))]
		}
	}
	return s
}
