fn main() {
    std::process::exit(kvload::app::main());
}
