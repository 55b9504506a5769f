//! `lockctl`: the operator's command line for the locks of `lock-runtime` (see the library's
//! docs, [`lockctl::main`]).

fn main() -> std::process::ExitCode {
    lockctl::main()
}
