fn main() {
    println!("ricochet");
}
