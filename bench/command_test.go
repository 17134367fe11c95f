package main

import "testing"

// A played loop adds up its commands' CPU, keeps the largest peak, and
// counts those of 50 ms or more (a batch) apart.
func TestAddCommand(t *testing.T) {
	var total measurement
	for _, c := range []measurement{
		{wall: ms(5), cpu: ms(3), maxRSS: 5 << 20},
		{wall: ms(900), cpu: ms(1400), maxRSS: 60 << 20},
		{wall: ms(49), cpu: ms(4), maxRSS: 6 << 20},
		{wall: ms(50), cpu: ms(60), maxRSS: 50 << 20},
	} {
		total.addCommand(c)
	}
	if total.cpu != ms(1467) || total.maxRSS != 60<<20 || total.long != 2 || total.longWall != ms(950) {
		t.Errorf("cpu %v, max RSS %d, %d long commands in %v; want 1.467s, 60 MiB, 2 in 950ms", total.cpu, total.maxRSS, total.long, total.longWall)
	}
}
