// SPDX-License-Identifier: Apache-2.0
//
// Goroutines that switch (qemu_emulate_cli_test):
//   goroutines chan N     two goroutines passing N values over an unbuffered channel, so that
//                         each send and receive parks one goroutine (runtime.mcall) and resumes
//                         the other (sweep 31a F1: the decoder stacked each goroutine's frames on
//                         the other's, `main.produce;runtime.chansend;runtime.chanrecv`)
//   goroutines preempt N  two goroutines computing N rounds each through one function; run with
//                         GOMAXPROCS=1, the scheduler preempts one in a function's prologue
//                         (morestack) and resumes the other (sweep 32a F1:
//                         `main.workA;main.step;main.leafB`)
// Prints the sum.
package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
)

//go:noinline
func square(i int) int { return i * i }

//go:noinline
func produce(n int, out chan<- int) {
	for i := 0; i < n; i++ {
		out <- square(i)
	}
	close(out)
}

//go:noinline
func fold(v int) int { return v % 7 }

//go:noinline
func consume(in <-chan int) int {
	sum := 0
	for v := range in {
		sum += fold(v)
	}
	return sum
}

//go:noinline
func leafA(i int) int { return i*3 + 1 }

//go:noinline
func leafB(i int) int { return i*5 + 2 }

//go:noinline
func step(i int, a bool) int {
	if a {
		return leafA(i)
	}
	return leafB(i)
}

//go:noinline
func workA(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += step(i, true)
	}
	return s
}

//go:noinline
func workB(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += step(i, false)
	}
	return s
}

func main() {
	if len(os.Args) != 3 {
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		os.Exit(2)
	}
	switch os.Args[1] {
	case "chan":
		ch := make(chan int)
		go produce(n, ch)
		fmt.Println(consume(ch))
	case "preempt":
		var wg sync.WaitGroup
		res := make([]int, 2)
		wg.Add(2)
		go func() { res[0] = workA(n); wg.Done() }()
		go func() { res[1] = workB(n); wg.Done() }()
		wg.Wait()
		fmt.Println(res[0] + res[1])
	default:
		os.Exit(2)
	}
}
