// Package sched plans the order in which the benchmark runs its contenders.
//
// Every round runs each contender exactly once, in a freshly shuffled order,
// so slow drift of the machine (thermal state, page cache, a neighbour's load)
// lands on all contenders alike instead of on whichever ran last, and no
// contender is always the one that follows another.
package sched

import (
	"fmt"
	"math/rand/v2"
)

// Plan returns rounds permutations of 0..n-1, drawn from rng. The caller
// passes a seeded generator so a run can be replayed.
func Plan(rounds, n int, rng *rand.Rand) ([][]int, error) {
	if rounds < 0 || n < 0 {
		return nil, fmt.Errorf("sched: negative size (rounds=%d, contenders=%d)", rounds, n)
	}
	if rng == nil {
		return nil, fmt.Errorf("sched: nil random source")
	}
	plan := make([][]int, rounds)
	for r := range plan {
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		rng.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
		plan[r] = order
	}
	return plan, nil
}

// NewRand returns the deterministic generator Plan is meant to be used with.
func NewRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}
