package sched

import (
	"fmt"
	"reflect"
	"testing"
)

func isPermutation(order []int, n int) bool {
	if len(order) != n {
		return false
	}
	seen := make([]bool, n)
	for _, i := range order {
		if i < 0 || i >= n || seen[i] {
			return false
		}
		seen[i] = true
	}
	return true
}

func TestEveryRoundRunsEveryContenderOnce(t *testing.T) {
	plan, err := Plan(50, 7, NewRand(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 50 {
		t.Fatalf("got %d rounds, want 50", len(plan))
	}
	for r, order := range plan {
		if !isPermutation(order, 7) {
			t.Fatalf("round %d is not a permutation of 0..6: %v", r, order)
		}
	}
}

func TestOrderIsShuffledAcrossRounds(t *testing.T) {
	const n = 4
	plan, err := Plan(200, n, NewRand(42))
	if err != nil {
		t.Fatal(err)
	}
	// Every contender should lead some round and close some round, so no
	// contender systematically follows another.
	first, last := make([]int, n), make([]int, n)
	distinct := map[string]bool{}
	for _, order := range plan {
		first[order[0]]++
		last[order[n-1]]++
		distinct[fmt.Sprint(order)] = true
	}
	for i := 0; i < n; i++ {
		if first[i] == 0 || last[i] == 0 {
			t.Errorf("contender %d: first %d times, last %d times over 200 rounds", i, first[i], last[i])
		}
	}
	// 4! = 24 orders exist; 200 shuffled rounds should show most of them.
	if len(distinct) < 12 {
		t.Errorf("only %d distinct orders over 200 rounds", len(distinct))
	}
}

func TestPlanIsReproducibleFromSeed(t *testing.T) {
	a, _ := Plan(20, 5, NewRand(7))
	b, _ := Plan(20, 5, NewRand(7))
	c, _ := Plan(20, 5, NewRand(8))
	if !reflect.DeepEqual(a, b) {
		t.Error("same seed gave different plans")
	}
	if reflect.DeepEqual(a, c) {
		t.Error("different seeds gave the same plan")
	}
}

func TestPlanEdgeCases(t *testing.T) {
	if plan, err := Plan(0, 3, NewRand(1)); err != nil || len(plan) != 0 {
		t.Errorf("zero rounds: %v, %v", plan, err)
	}
	if plan, err := Plan(3, 0, NewRand(1)); err != nil || len(plan) != 3 || len(plan[0]) != 0 {
		t.Errorf("zero contenders: %v, %v", plan, err)
	}
	if _, err := Plan(-1, 3, NewRand(1)); err == nil {
		t.Error("negative rounds accepted")
	}
	if _, err := Plan(1, 3, nil); err == nil {
		t.Error("nil rng accepted")
	}
}
