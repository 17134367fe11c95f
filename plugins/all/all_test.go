package all

import "testing"

func TestSchemasAreValid(t *testing.T) {
	p := Builtin()
	for name, s := range p.Sources {
		if err := s.Schema().Validate(); err != nil {
			t.Errorf("source %s: %v", name, err)
		}
		if _, ok := s.Schema().KeyAttribute(); ok {
			t.Errorf("source %s declares a key attribute; only sinks have one", name)
		}
	}
	for name, s := range p.Sinks {
		if err := s.Schema().Validate(); err != nil {
			t.Errorf("sink %s: %v", name, err)
		}
	}
}
