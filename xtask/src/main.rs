//! Project commands: `cargo xtask <command>`.

use anyhow::{Result, bail};

const HELP: &str = "\
cargo xtask <command>

commands:
  help    print this help
";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        None | Some("help" | "--help" | "-h") => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => {
            eprint!("{HELP}");
            bail!("unknown command `{other}`")
        }
    }
}
