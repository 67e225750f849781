#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    airlock::cli::main()
}
