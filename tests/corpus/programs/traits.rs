// A small Rust program: trait objects, generics, closures, a panic caught by catch_unwind
// (unwinding through frames), and the standard library's formatting. Its own functions and
// the standard library's are named with Rust's v0 mangling (rustc's standard library is built
// with it; `-C symbol-mangling-version=v0` for the program's own code).
use std::hint::black_box;
use std::panic;

trait Shape {
    fn area(&self) -> u64;
}

struct Square(u64);
struct Rect(u64, u64);

impl Shape for Square {
    #[inline(never)]
    fn area(&self) -> u64 {
        self.0 * self.0
    }
}

impl Shape for Rect {
    #[inline(never)]
    fn area(&self) -> u64 {
        self.0 * self.1
    }
}

#[inline(never)]
fn total<T: Shape + ?Sized>(shapes: &[Box<T>]) -> u64 {
    shapes.iter().map(|s| s.area()).sum()
}

#[inline(never)]
fn checked(n: u64) -> u64 {
    if n > 3 {
        panic!("too big: {n}");
    }
    n * 2
}

fn main() {
    let shapes: Vec<Box<dyn Shape>> =
        (0..black_box(20u64)).map(|i| if i % 2 == 0 { Box::new(Square(i)) as Box<dyn Shape> } else { Box::new(Rect(i, 3)) as Box<dyn Shape> }).collect();
    let sum = total(&shapes);
    panic::set_hook(Box::new(|_| {}));
    let mut caught = 0;
    for n in 0..black_box(6u64) {
        if panic::catch_unwind(|| checked(black_box(n))).is_err() {
            caught += 1;
        }
    }
    println!("{sum} {caught}");
}
