//! Project commands: `cargo xtask <command>`.

mod conformance;
mod interop;
mod layout;
mod new;

use anyhow::{Result, bail};
use std::path::PathBuf;

const HELP: &str = "\
cargo xtask <command>

commands:
  conformance   run the official MCP conformance suite against the fixture server (both eras, all tasks-*)
  interop       drive the fixture server with real SDK clients and the Inspector CLI (stdio and HTTP)
  layout        check that no source file is over 1,000 lines and no modules import each other in a circle
  new           scaffold a task-tool server crate (`cargo xtask new --help`)
  help          print this help
";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        None | Some("help" | "--help" | "-h") => {
            print!("{HELP}");
            Ok(())
        }
        Some("conformance") => conformance::run(args.collect()),
        Some("interop") => interop::run(args.collect()),
        Some("layout") => layout::run(args.collect()),
        Some("new") => new::run(args.collect()),
        Some(other) => {
            eprint!("{HELP}");
            bail!("unknown command `{other}`")
        }
    }
}

/// The workspace root: the parent of this crate's directory.
fn project_root() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    dir.parent().map(PathBuf::from).unwrap_or(dir)
}
