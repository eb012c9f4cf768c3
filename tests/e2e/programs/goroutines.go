// SPDX-License-Identifier: Apache-2.0
//
// Two goroutines passing values over an unbuffered channel, so that each send and receive
// parks one goroutine and resumes the other (qemu_emulate_cli_test; sweep 31a F1: the decoder
// stacked each goroutine's frames on the other's, `main.produce;runtime.chansend;
// runtime.chanrecv`). Prints the sum.
package main

import (
	"fmt"
	"os"
	"strconv"
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

func main() {
	n, err := strconv.Atoi(os.Args[1])
	if err != nil {
		os.Exit(2)
	}
	ch := make(chan int)
	go produce(n, ch)
	fmt.Println(consume(ch))
}
