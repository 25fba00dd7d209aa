//! `cargo xtask new`: scaffolds a task-tool server crate from the templates in
//! `xtask/templates/server`.
//!
//! Templates are plain files ending in `.in`. They use `{{variable}}` substitution and
//! line-level conditionals: a line that holds only `{{#if flag}}`, `{{else}}` or `{{/if}}`
//! opens, flips or closes a block and is itself left out. The flags are `stdio`, `http`,
//! `memory`, `sqlite`, `postgres`, `oauth` (an OAuth resource server) and `workspace` (the
//! crate is a member of a workspace).

use anyhow::{Context as _, Result, bail};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};

/// The usage of `cargo xtask new`.
pub(crate) const USAGE: &str = "\
cargo xtask new <name> [--dir <path>] [--transport stdio|http] [--store memory|sqlite|postgres]
                       [--auth none|oauth] [--force]

Creates the server crate <dir>/<name>: one #[task_tool] that runs as a task and reports
progress, and one plain tool, served over the chosen transport with the chosen task store,
with a README and a test that follows a task from its creation to its result. A crate inside
this workspace is added to the workspace members.

options:
  --dir <path>          the directory to create the crate in (default: the workspace root);
                        a relative path is relative to the workspace root
  --transport <kind>    stdio (default) or http
  --store <kind>        sqlite (default: durable tasks in ./data), memory, or postgres (tasks in
                        the PostgreSQL database that DATABASE_URL names, shared by every server
                        and worker on it)
  --auth <kind>         none (default), or oauth: an OAuth 2.1 resource server over HTTP that
                        accepts only access tokens the authorization server named by
                        <NAME>_ISSUER issued for it, with one tool that needs a scope
                        (implies --transport http)
  --force               write into an existing directory, replacing the template's files
  -h, --help            print this help
";

/// This workspace's own crates and the generated crate's dependencies, which a new crate must
/// not be named after.
const TAKEN_NAMES: [&str; 7] = [
    "mcp-tasks",
    "mcp-tasks-macros",
    "mcp-tasks-runtime",
    "xtask",
    "anyhow",
    "tokio",
    "serde_json",
];

/// Names cargo reserves (besides keywords): the standard crates, `test`, the directories of
/// its build output, and two directories of this workspace's root.
const RESERVED_NAMES: [&str; 11] = [
    "std",
    "core",
    "alloc",
    "proc_macro",
    "test",
    "build",
    "deps",
    "examples",
    "incremental",
    "src",
    "target",
];

/// Names Windows reserves for devices (and `com1` to `com9`, `lpt1` to `lpt9`).
const WINDOWS_NAMES: [&str; 4] = ["con", "prn", "aux", "nul"];

/// The keywords of Rust 2024, which cannot name a crate.
const KEYWORDS: [&str; 51] = [
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
    "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
    "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
    "return", "self", "static", "struct", "super", "trait", "true", "try", "type", "typeof",
    "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// How the generated server talks to clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// One client on stdin and stdout.
    Stdio,
    /// Streamable HTTP on a loopback port.
    Http,
}

/// Where the generated server keeps its tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Store {
    /// In memory, for the life of the process.
    Memory,
    /// In a SQLite database file.
    Sqlite,
    /// In a PostgreSQL database.
    Postgres,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Stdio => "stdio",
            Self::Http => "http",
        })
    }
}

impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Memory => "memory",
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        })
    }
}

/// How the generated server authenticates its clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Auth {
    /// It does not: anyone who reaches it may call it.
    None,
    /// An OAuth 2.1 resource server: bearer access tokens of one authorization server.
    OAuth,
}

/// The command line of `cargo xtask new`.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    name: String,
    dir: Option<PathBuf>,
    transport: Transport,
    store: Store,
    auth: Auth,
    force: bool,
}

/// What to generate, and where the crate sits relative to `mcp-tasks`.
#[derive(Debug)]
pub(crate) struct Options {
    /// The package name.
    pub(crate) name: String,
    /// The transport the server is served on.
    pub(crate) transport: Transport,
    /// The task store.
    pub(crate) store: Store,
    /// How clients are authenticated.
    pub(crate) auth: Auth,
    /// The crate's directory (absolute).
    pub(crate) crate_dir: PathBuf,
    /// The directory of the `mcp-tasks` facade crate (absolute).
    pub(crate) mcp_tasks_dir: PathBuf,
    /// Whether the crate is a member of a workspace (and inherits its lints).
    pub(crate) in_workspace: bool,
}

/// Runs `cargo xtask new` with the arguments after `new`.
pub(crate) fn run(args: Vec<String>) -> Result<()> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{USAGE}");
        return Ok(());
    }
    let args = parse(args).inspect_err(|_| eprintln!("{USAGE}"))?;
    check_name(&args.name)?;

    let root = crate::project_root().canonicalize()?;
    let manifest_path = root.join("Cargo.toml");
    let manifest = std::fs::read_to_string(&manifest_path)?;
    let dir = match &args.dir {
        Some(dir) => root.join(dir),
        None => root.clone(),
    };
    let target = dir.join(&args.name);
    if target.exists() && !args.force {
        bail!(
            "{} already exists; pass --force to write the template's files into it",
            target.display()
        );
    }
    if let Ok(existing) = std::fs::read_to_string(target.join("Cargo.toml"))
        && let Some(other) = package_name(&existing).filter(|n| *n != args.name)
    {
        bail!(
            "{} holds the package `{other}`: --force only rewrites a crate called `{}`",
            target.display(),
            args.name
        );
    }
    // Where the crate will be relative to the root decides whether it joins the workspace;
    // the directory is resolved (symbolic links, `..`) once it exists.
    let created = !target.exists();
    std::fs::create_dir_all(&target)
        .with_context(|| format!("cannot create {}", target.display()))?;
    let target = target.canonicalize()?;
    let member = target
        .strip_prefix(&root)
        .ok()
        .filter(|p| !p.as_os_str().is_empty())
        .map(slash_path);
    if let Some(member) = &member
        && let Err(e) = check_unique(&args.name, &root, &manifest, member)
    {
        if created {
            let _ = std::fs::remove_dir(&target);
        }
        return Err(e);
    }

    let options = Options {
        name: args.name.clone(),
        transport: args.transport,
        store: args.store,
        auth: args.auth,
        crate_dir: target.clone(),
        mcp_tasks_dir: root.clone(),
        in_workspace: member.is_some(),
    };
    let files = render(&options)?;
    write(&files, &target)?;
    let shown = member
        .clone()
        .unwrap_or_else(|| target.display().to_string());
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    println!(
        "created {shown} ({} transport, {} task store{}): {}",
        args.transport,
        args.store,
        if args.auth == Auth::OAuth {
            ", OAuth resource server"
        } else {
            ""
        },
        names.join(", ")
    );

    let name = &args.name;
    if let Some(member) = member {
        match add_member(&manifest, &member)? {
            Some(updated) => {
                std::fs::write(&manifest_path, updated)?;
                println!("added \"{member}\" to the workspace members in Cargo.toml");
            }
            None => println!("\"{member}\" is already a workspace member"),
        }
        println!(
            "\nnext:\n  \
             cargo run -p {name}     # serve\n  \
             cargo test -p {name}    # follow a task from its creation to its result\n\
             \n{member}/README.md says how to connect a client and add a tool."
        );
    } else {
        println!(
            "\nnext:\n  \
             cd {shown}\n  \
             cargo run     # serve\n  \
             cargo test    # follow a task from its creation to its result\n\
             \nREADME.md says how to connect a client and add a tool."
        );
    }
    Ok(())
}

fn parse(args: Vec<String>) -> Result<Args> {
    let mut name = None;
    let mut dir = None;
    let mut transport = Transport::Stdio;
    let mut store = Store::Sqlite;
    let mut auth = Auth::None;
    let mut transport_given = false;
    let mut force = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if arg.starts_with("--") => (flag.to_owned(), Some(value.into())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| -> Result<String> {
            match inline.clone().or_else(|| args.next()) {
                Some(v) if !v.is_empty() => Ok(v),
                _ => bail!("`{flag}` needs {what}"),
            }
        };
        match flag.as_str() {
            "--dir" => dir = Some(PathBuf::from(value("a path")?)),
            "--transport" => {
                transport_given = true;
                transport = match value("`stdio` or `http`")?.as_str() {
                    "stdio" => Transport::Stdio,
                    "http" => Transport::Http,
                    other => bail!("unknown transport `{other}`: expected `stdio` or `http`"),
                }
            }
            "--store" => {
                store = match value("`memory`, `sqlite` or `postgres`")?.as_str() {
                    "memory" => Store::Memory,
                    "sqlite" => Store::Sqlite,
                    "postgres" => Store::Postgres,
                    other => {
                        bail!("unknown store `{other}`: expected `memory`, `sqlite` or `postgres`")
                    }
                }
            }
            "--auth" => {
                auth = match value("`none` or `oauth`")?.as_str() {
                    "none" => Auth::None,
                    "oauth" => Auth::OAuth,
                    other => bail!("unknown authentication `{other}`: expected `none` or `oauth`"),
                }
            }
            "--force" if inline.is_none() => force = true,
            _ if flag.starts_with('-') => bail!("unknown option `{arg}`"),
            _ if name.is_some() => bail!("unexpected argument `{arg}`: give one crate name"),
            _ => name = Some(arg),
        }
    }
    let Some(name) = name else {
        bail!("missing the crate name");
    };
    if auth == Auth::OAuth {
        if transport_given && transport == Transport::Stdio {
            bail!(
                "`--auth oauth` protects an HTTP server: it does not go with `--transport stdio`"
            );
        }
        transport = Transport::Http;
    }
    Ok(Args {
        name,
        dir,
        transport,
        store,
        auth,
        force,
    })
}

/// Checks that `name` is a crate name cargo accepts.
fn check_name(name: &str) -> Result<()> {
    let invalid = |why: &str| anyhow::anyhow!("invalid crate name `{name}`: {why}");
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(invalid("it must start with a lowercase ASCII letter"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
    {
        return Err(invalid(&format!(
            "`{c}` is not allowed; use lowercase ASCII letters, digits, `-` and `_`"
        )));
    }
    if name.len() > 64 {
        return Err(invalid("it is longer than 64 characters"));
    }
    let normalized = name.replace('-', "_");
    if KEYWORDS.contains(&name) {
        return Err(invalid("it is a Rust keyword"));
    }
    let windows = WINDOWS_NAMES.contains(&name)
        || ((name.starts_with("com") || name.starts_with("lpt"))
            && name.len() == 4
            && name.ends_with(|c: char| c.is_ascii_digit()));
    if windows || RESERVED_NAMES.contains(&normalized.as_str()) {
        return Err(invalid("cargo or the operating system reserves it"));
    }
    if TAKEN_NAMES
        .iter()
        .any(|t| t.replace('-', "_") == normalized)
    {
        return Err(invalid(
            "this workspace or the generated crate already uses a crate of that name",
        ));
    }
    Ok(())
}

/// Checks that no package of the workspace at `root`, other than the one at `member`, is
/// called `name`.
fn check_unique(name: &str, root: &Path, manifest: &str, member: &str) -> Result<()> {
    let normalized = name.replace('-', "_");
    let mut packages = vec![(String::new(), manifest.to_owned())];
    for path in members(manifest).unwrap_or_default() {
        if path != member
            && let Ok(text) = std::fs::read_to_string(root.join(&path).join("Cargo.toml"))
        {
            packages.push((path, text));
        }
    }
    for (path, text) in packages {
        if package_name(&text).is_some_and(|n| n.replace('-', "_") == normalized) {
            let place = if path.is_empty() {
                "the workspace root"
            } else {
                &path
            };
            bail!("the package in {place} is already called `{name}`: choose another name");
        }
    }
    Ok(())
}

/// The `name` in the `[package]` table of a manifest.
fn package_name(manifest: &str) -> Option<&str> {
    let table = manifest.find("[package]")?;
    manifest[table..]
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.trim() == "name").then(|| value.trim().trim_matches('"'))
        })
}

/// Renders every template for `options`: the crate's files by path (with `/`), in order.
pub(crate) fn render(options: &Options) -> Result<BTreeMap<String, String>> {
    let templates = crate::project_root().join("xtask/templates/server");
    let vars = variables(options);
    let flags = [
        ("stdio", options.transport == Transport::Stdio),
        ("http", options.transport == Transport::Http),
        ("memory", options.store == Store::Memory),
        ("sqlite", options.store == Store::Sqlite),
        ("postgres", options.store == Store::Postgres),
        ("oauth", options.auth == Auth::OAuth),
        ("workspace", options.in_workspace),
    ];
    let mut files = BTreeMap::new();
    for template in list_files(&templates)? {
        let Some(path) = template.strip_suffix(".in") else {
            bail!("xtask/templates/server/{template}: template files end in `.in`");
        };
        let text = std::fs::read_to_string(templates.join(&template))?;
        let text = render_text(&text, &vars, &flags)
            .with_context(|| format!("xtask/templates/server/{template}"))?;
        files.insert(path.to_owned(), text);
    }
    Ok(files)
}

fn variables(options: &Options) -> BTreeMap<&'static str, String> {
    let mut wanted = Vec::new();
    if options.transport == Transport::Http {
        wanted.push("\"http\"");
    }
    if options.auth == Auth::OAuth {
        wanted.push("\"oauth\"");
    }
    match options.store {
        Store::Memory => {}
        Store::Sqlite => wanted.push("\"sqlite\""),
        Store::Postgres => wanted.push("\"postgres\""),
    }
    // Traces and metrics over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set.
    wanted.push("\"otel\"");
    let features = if wanted.is_empty() {
        String::new()
    } else {
        format!(", features = [{}]", wanted.join(", "))
    };
    BTreeMap::from([
        ("name", options.name.clone()),
        ("crate_name", options.name.replace('-', "_")),
        (
            "env_prefix",
            options.name.replace('-', "_").to_ascii_uppercase(),
        ),
        (
            "mcp_tasks_path",
            relative_path(&options.crate_dir, &options.mcp_tasks_dir),
        ),
        ("mcp_tasks_features", features),
    ])
}

/// Expands `{{variable}}`s and `{{#if flag}}` / `{{else}}` / `{{/if}}` lines.
fn render_text(
    template: &str,
    vars: &BTreeMap<&str, String>,
    flags: &[(&str, bool)],
) -> Result<String> {
    // Each open block: whether its lines are kept, and whether the enclosing ones are.
    let mut blocks: Vec<(bool, bool)> = Vec::new();
    let mut out = String::with_capacity(template.len());
    for (n, line) in template.split_inclusive('\n').enumerate() {
        let n = n + 1;
        let keep = blocks.last().is_none_or(|&(keep, _)| keep);
        let directive = line.trim();
        if let Some(flag) = directive
            .strip_prefix("{{#if ")
            .and_then(|d| d.strip_suffix("}}"))
        {
            let Some(&(_, value)) = flags.iter().find(|(f, _)| *f == flag.trim()) else {
                bail!("line {n}: unknown flag `{}`", flag.trim());
            };
            blocks.push((keep && value, keep));
        } else if directive == "{{else}}" {
            let Some((kept, outer)) = blocks.pop() else {
                bail!("line {n}: `{{{{else}}}}` outside `{{{{#if}}}}`");
            };
            blocks.push((outer && !kept, outer));
        } else if directive == "{{/if}}" {
            if blocks.pop().is_none() {
                bail!("line {n}: `{{{{/if}}}}` without `{{{{#if}}}}`");
            }
        } else if keep {
            out.push_str(&substitute(line, vars).with_context(|| format!("line {n}"))?);
        }
    }
    if !blocks.is_empty() {
        bail!("an `{{{{#if}}}}` is not closed");
    }
    Ok(out)
}

fn substitute(line: &str, vars: &BTreeMap<&str, String>) -> Result<String> {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let Some(len) = rest[start..].find("}}") else {
            bail!("`{{{{` without `}}}}`");
        };
        let key = &rest[start + 2..start + len];
        let Some(value) = vars.get(key) else {
            bail!("unknown variable `{key}`");
        };
        out.push_str(value);
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Writes `files` under `dir`, creating directories as needed.
pub(crate) fn write(files: &BTreeMap<String, String>, dir: &Path) -> Result<()> {
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// Every file under `dir`, as paths relative to it with `/` separators, sorted.
pub(crate) fn list_files(dir: &Path) -> Result<Vec<String>> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) -> Result<()> {
        for entry in
            std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                walk(&path, base, out)?;
            } else {
                out.push(slash_path(path.strip_prefix(base)?));
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(dir, dir, &mut files)?;
    files.sort();
    Ok(files)
}

/// `path` with `/` between its components.
fn slash_path(path: &Path) -> String {
    let parts: Vec<_> = path
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

/// The path from directory `from` to directory `to` (both absolute), with `/` separators,
/// or `to` itself when they share no root.
fn relative_path(from: &Path, to: &Path) -> String {
    let from: Vec<Component<'_>> = from.components().collect();
    let to_parts: Vec<Component<'_>> = to.components().collect();
    let common = from
        .iter()
        .zip(&to_parts)
        .take_while(|(a, b)| a == b)
        .count();
    if common == 0 {
        return slash_path(to);
    }
    let mut parts: Vec<String> = vec!["..".to_owned(); from.len() - common];
    parts.extend(
        to_parts[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    if parts.is_empty() {
        ".".to_owned()
    } else {
        parts.join("/")
    }
}

/// Where the `[workspace]` table's `members = [...]` array is: the byte offsets of its `[`
/// and `]`.
fn members_span(manifest: &str) -> Option<(usize, usize)> {
    let table = manifest
        .match_indices("[workspace]")
        .map(|(i, _)| i)
        .find(|&i| i == 0 || manifest[..i].ends_with('\n'))?;
    let table_end = manifest[table + 1..]
        .find("\n[")
        .map_or(manifest.len(), |i| table + 1 + i);
    let key = manifest[table..table_end]
        .match_indices("members")
        .map(|(i, _)| table + i)
        .find(|&i| manifest[..i].ends_with('\n'))?;
    let open = key + manifest[key..].find('[')?;
    let close = open + manifest[open..].find(']')?;
    Some((open, close))
}

/// The paths in the workspace's `members` array.
fn members(manifest: &str) -> Option<Vec<String>> {
    let (open, close) = members_span(manifest)?;
    Some(
        manifest[open + 1..close]
            .split(',')
            .map(|e| e.trim().trim_matches('"').trim_end_matches('/').to_owned())
            .filter(|e| !e.is_empty())
            .collect(),
    )
}

/// Adds `member` to the `members` array of the `[workspace]` table of `manifest`, keeping
/// the file's layout. `None` when it is already there.
fn add_member(manifest: &str, member: &str) -> Result<Option<String>> {
    let Some((open, close)) = members_span(manifest) else {
        bail!("the root Cargo.toml has no `[workspace] members = [...]`: add \"{member}\" by hand");
    };
    if members(manifest)
        .unwrap_or_default()
        .iter()
        .any(|m| m == member)
    {
        return Ok(None);
    }
    let inner = &manifest[open + 1..close];
    let mut out = String::with_capacity(manifest.len() + member.len() + 8);
    out.push_str(&manifest[..=open]);
    if inner.contains('\n') {
        // One entry a line: copy the last entry's indentation and keep a trailing comma.
        let body = inner.trim_end();
        let last = body.rsplit('\n').next().unwrap_or_default();
        let indent = &last[..last.len() - last.trim_start().len()];
        let indent = if indent.is_empty() { "    " } else { indent };
        out.push_str(body);
        if !body.ends_with(',') && !body.trim().is_empty() {
            out.push(',');
        }
        out.push_str(&format!("\n{indent}\"{member}\",\n"));
    } else {
        let body = inner.trim_end().trim_end_matches(',');
        out.push_str(body);
        if !body.trim().is_empty() {
            out.push_str(", ");
        }
        out.push_str(&format!("\"{member}\""));
    }
    out.push_str(&manifest[close..]);
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::process::Command;

    /// The build directory: `$CARGO_TARGET_DIR`, or `target/` in the workspace.
    fn target_dir() -> PathBuf {
        std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| crate::project_root().join("target"), PathBuf::from)
    }

    /// An empty scratch directory under the build directory.
    fn scratch(name: &str) -> PathBuf {
        let dir = target_dir().join("tmp").join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        dir
    }

    fn options(name: &str, transport: Transport, store: Store, crate_dir: PathBuf) -> Options {
        Options {
            name: name.to_owned(),
            transport,
            store,
            auth: Auth::None,
            crate_dir,
            mcp_tasks_dir: crate::project_root(),
            in_workspace: true,
        }
    }

    /// The `[workspace.lints.*]` tables of a manifest.
    fn workspace_lints(manifest: &str) -> String {
        let mut out = String::new();
        let mut inside = false;
        for line in manifest.lines() {
            if line.starts_with('[') {
                inside = line.starts_with("[workspace.lints");
            }
            if inside {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    fn args(line: &str) -> Result<Args> {
        parse(line.split_whitespace().map(str::to_owned).collect())
    }

    #[test]
    fn parse_reads_every_option_in_both_spellings() {
        let parsed = args("demo --dir=servers --transport http --store=postgres --force").unwrap();
        assert_eq!(
            parsed,
            Args {
                name: "demo".into(),
                dir: Some("servers".into()),
                transport: Transport::Http,
                store: Store::Postgres,
                auth: Auth::None,
                force: true,
            }
        );
        let protected = args("demo --auth oauth").unwrap();
        assert_eq!(
            (protected.auth, protected.transport),
            (Auth::OAuth, Transport::Http)
        );
        let defaults = args("demo").unwrap();
        assert_eq!(
            (
                defaults.dir,
                defaults.transport,
                defaults.store,
                defaults.force
            ),
            (None, Transport::Stdio, Store::Sqlite, false)
        );
    }

    #[test]
    fn parse_refuses_bad_arguments() {
        for (line, error) in [
            ("", "missing the crate name"),
            ("a b", "unexpected argument `b`"),
            ("a --transport", "`--transport` needs"),
            ("a --transport tcp", "unknown transport `tcp`"),
            ("a --store redis", "unknown store `redis`"),
            ("a --auth basic", "unknown authentication `basic`"),
            (
                "a --auth oauth --transport stdio",
                "does not go with `--transport stdio`",
            ),
            ("a --dir", "`--dir` needs a path"),
            ("a --force=yes", "unknown option `--force=yes`"),
            ("a --verbose", "unknown option `--verbose`"),
        ] {
            let e = args(line).expect_err(line).to_string();
            assert!(e.contains(error), "{line:?}: {e}");
        }
    }

    #[test]
    fn check_name_accepts_crate_names_and_explains_refusals() {
        for name in ["demo", "my-server", "my_server2", &"a".repeat(64)] {
            check_name(name).unwrap();
        }
        for (name, why) in [
            ("", "must start with a lowercase ASCII letter"),
            ("9lives", "must start with a lowercase ASCII letter"),
            ("-x", "must start with a lowercase ASCII letter"),
            ("Demo", "must start with a lowercase ASCII letter"),
            ("my.server", "`.` is not allowed"),
            ("mY", "`Y` is not allowed"),
            (&"a".repeat(65), "longer than 64"),
            ("fn", "Rust keyword"),
            ("test", "reserves it"),
            ("proc-macro", "reserves it"),
            ("com1", "reserves it"),
            ("tokio", "already uses a crate of that name"),
            ("mcp_tasks", "already uses a crate of that name"),
            ("xtask", "already uses a crate of that name"),
        ] {
            let e = check_name(name).expect_err(name).to_string();
            assert!(e.contains(why), "{name:?}: {e}");
        }
    }

    #[test]
    fn render_text_substitutes_and_keeps_only_the_chosen_blocks() {
        let vars = BTreeMap::from([("name", "demo".to_owned())]);
        let flags = [("a", true), ("b", false)];
        let template = "\
{{name}}: {{name}}
{{#if a}}
a
  {{#if b}}
a and b
  {{else}}
a, not b
  {{/if}}
{{else}}
not a
{{/if}}
{{#if b}}
b
{{/if}}
end
";
        let out = render_text(template, &vars, &flags).unwrap();
        assert_eq!(out, "demo: demo\na\na, not b\nend\n");

        for (template, error) in [
            ("{{nmae}}\n", "unknown variable `nmae`"),
            ("{{#if c}}\n{{/if}}\n", "unknown flag `c`"),
            ("{{#if a}}\n", "not closed"),
            ("{{/if}}\n", "without"),
            ("{{else}}\n", "outside"),
        ] {
            let e = format!("{:#}", render_text(template, &vars, &flags).unwrap_err());
            assert!(e.contains(error), "{template:?}: {e}");
        }
    }

    #[test]
    fn relative_path_climbs_to_the_common_ancestor() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(relative_path(&p("/w/examples/demo"), &p("/w")), "../..");
        assert_eq!(relative_path(&p("/w/demo"), &p("/w")), "..");
        assert_eq!(relative_path(&p("/tmp/x/demo"), &p("/w")), "../../../w");
        assert_eq!(relative_path(&p("/w"), &p("/w")), ".");
    }

    #[test]
    fn add_member_keeps_the_array_layout() {
        let one_line = "[workspace]\nmembers = [\"a\", \"b\"]\nresolver = \"3\"\n";
        assert_eq!(
            add_member(one_line, "examples/c").unwrap().unwrap(),
            "[workspace]\nmembers = [\"a\", \"b\", \"examples/c\"]\nresolver = \"3\"\n"
        );
        assert_eq!(add_member(one_line, "b").unwrap(), None);
        assert_eq!(
            add_member("[workspace]\nmembers = []\n", "c")
                .unwrap()
                .unwrap(),
            "[workspace]\nmembers = [\"c\"]\n"
        );

        let lines = "[package]\nname = \"x\"\n\n[workspace]\nmembers = [\n  \"a\",\n  \"b\"\n]\n";
        assert_eq!(
            add_member(lines, "c").unwrap().unwrap(),
            "[package]\nname = \"x\"\n\n[workspace]\nmembers = [\n  \"a\",\n  \"b\",\n  \"c\",\n]\n"
        );
        assert!(add_member("[workspace.package]\nmembers = []\n", "c").is_err());
        assert!(add_member("[workspace]\nresolver = \"3\"\n[x]\nmembers = []\n", "c").is_err());
    }

    #[test]
    fn package_name_reads_the_package_table() {
        let manifest = "[workspace]\nmembers = []\n\n[package]\nname = \"mcp-tasks\"\n[dependencies]\nname = \"no\"\n";
        assert_eq!(package_name(manifest), Some("mcp-tasks"));
        assert_eq!(package_name("[workspace]\n"), None);
    }

    #[test]
    fn examples_hello_tasks_is_what_the_default_template_makes() {
        let root = crate::project_root();
        let example = root.join("examples/hello-tasks");
        let rendered = scratch("xtask-new-hello-tasks");
        // The example follows whatever the defaults are.
        let defaults = args("hello-tasks").expect("the default options");
        let files = render(&options(
            "hello-tasks",
            defaults.transport,
            defaults.store,
            example.clone(),
        ))
        .expect("render the templates");
        write(&files, &rendered).expect("write the crate");

        let wanted = list_files(&rendered).expect("list the rendered crate");
        let found = list_files(&example).unwrap_or_default();
        let mut problems = Vec::new();
        for file in &wanted {
            match std::fs::read(example.join(file)) {
                Err(_) => problems.push(format!("{file} is missing")),
                Ok(bytes) if bytes != std::fs::read(rendered.join(file)).expect("read") => {
                    problems.push(format!("{file} differs"));
                }
                Ok(_) => {}
            }
        }
        for file in found.iter().filter(|f| !wanted.contains(f)) {
            problems.push(format!("{file} is not made by the template (delete it)"));
        }
        assert!(
            problems.is_empty(),
            "examples/hello-tasks is not what xtask/templates/server makes with the default \
             options:\n  {}\nrun `cargo xtask new hello-tasks --dir examples --force` and commit",
            problems.join("\n  ")
        );
    }

    /// The `mcp-tasks` features a crate's sources use: `http` for the HTTP transport,
    /// `sqlite` for the SQLite store, `postgres` for the PostgreSQL store.
    fn features_used(sources: &[String]) -> Vec<&'static str> {
        let uses = |marker: &str| sources.iter().any(|s| s.contains(marker));
        let mut features = Vec::new();
        if uses("serve_http") || uses("transport::http") {
            features.push("http");
        }
        if uses("ResourceServer") {
            features.push("oauth");
        }
        if uses("SqliteTaskStore") {
            features.push("sqlite");
        }
        if uses("PostgresTaskStore") {
            features.push("postgres");
        }
        if uses("otel::") {
            features.push("otel");
        }
        features
    }

    /// The features on the `mcp-tasks` line of a manifest.
    fn features_declared(manifest: &str) -> Vec<String> {
        let line = manifest
            .lines()
            .find(|l| l.starts_with("mcp-tasks ="))
            .expect("an mcp-tasks dependency");
        line.split_once("features = [")
            .map_or_else(Vec::new, |(_, rest)| {
                rest.split(']')
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(|f| f.trim().trim_matches('"').to_owned())
                    .filter(|f| !f.is_empty())
                    .collect()
            })
    }

    #[test]
    fn features_used_are_read_from_the_sources() {
        let http = ["let h = server.serve_http(config);".to_owned()];
        assert_eq!(features_used(&http), ["http"]);
        let sqlite = ["use mcp_tasks::store::SqliteTaskStore;".to_owned()];
        assert_eq!(features_used(&sqlite), ["sqlite"]);
        let postgres = ["PostgresTaskStore::connect(&url)".to_owned()];
        assert_eq!(features_used(&postgres), ["postgres"]);
        assert!(features_used(&["fn main() {}".to_owned()]).is_empty());
        let manifest =
            "[dependencies]\nmcp-tasks = { path = \"..\", features = [\"http\", \"sqlite\"] }\n";
        assert_eq!(features_declared(manifest), ["http", "sqlite"]);
        assert!(features_declared("mcp-tasks = { path = \"..\" }").is_empty());
    }

    /// Renders every transport and store, and a server protected by OAuth, into a scratch workspace that uses this workspace's
    /// crates by path, and checks them, sharing the workspace's build directory.
    ///
    /// All seven crates are checked in one `cargo check`, so the runtime is compiled once, with
    /// their features unified, instead of once per feature set. Unified features could hide a
    /// crate that uses an `mcp-tasks` feature it does not declare, so each crate's manifest is
    /// compared with the features its sources use.
    #[test]
    fn every_transport_and_store_makes_a_crate_that_checks_without_warnings() {
        let root = crate::project_root();
        let workspace = target_dir().join("tmp/xtask-new-combinations");
        std::fs::create_dir_all(&workspace).expect("create the scratch workspace");
        // Crates with the longest names crates.io allows are only formatted, not built: how
        // rustfmt lays out a line must not depend on the length of the name in it.
        let long_names = scratch("xtask-new-long-names");
        let mut names = Vec::new();
        let mut sources = Vec::new();
        let combinations = [Transport::Stdio, Transport::Http]
            .into_iter()
            .flat_map(|t| {
                [Store::Memory, Store::Sqlite, Store::Postgres].map(|s| (t, s, Auth::None))
            })
            .chain([(Transport::Http, Store::Sqlite, Auth::OAuth)]);
        for (transport, store, auth) in combinations {
            {
                let name = match auth {
                    Auth::None => format!("scaffold-{transport}-{store}"),
                    Auth::OAuth => format!("scaffold-oauth-{store}"),
                };
                let long_name = format!("{name:x<64}");
                for (name, dir) in [
                    (&name, workspace.join(&name)),
                    (&long_name, long_names.join(&long_name)),
                ] {
                    let _ = std::fs::remove_dir_all(&dir);
                    let options = Options {
                        auth,
                        ..options(name, transport, store, dir.clone())
                    };
                    let files = render(&options).expect("render the templates");
                    write(&files, &dir).expect("write the crate");
                    let rust = files.keys().filter(|f| f.ends_with(".rs"));
                    sources.extend(rust.map(|f| dir.join(f)));
                    let code: Vec<String> = files
                        .iter()
                        .filter(|(f, _)| f.ends_with(".rs"))
                        .map(|(_, text)| text.clone())
                        .collect();
                    assert_eq!(
                        features_declared(&files["Cargo.toml"]),
                        features_used(&code),
                        "{name}: the mcp-tasks features in Cargo.toml are not the ones its code \
                         uses: fix `variables` or the templates"
                    );
                }
                names.push(name);
            }
        }
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("read Cargo.toml");
        let members: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
        std::fs::write(
            workspace.join("Cargo.toml"),
            format!(
                "[workspace]\nmembers = [{}]\nresolver = \"3\"\n\n{}",
                members.join(", "),
                workspace_lints(&manifest)
            ),
        )
        .expect("write the workspace manifest");
        // The same versions as this workspace, so that its builds are reused.
        std::fs::copy(root.join("Cargo.lock"), workspace.join("Cargo.lock"))
            .expect("copy Cargo.lock");

        let status = Command::new("rustfmt")
            .args(["--check", "--edition", "2024"])
            .args(&sources)
            .status()
            .expect("run rustfmt");
        assert!(
            status.success(),
            "the templates are not formatted as rustfmt wants (see the diff above): fix \
             xtask/templates/server"
        );

        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let _ = writeln!(
            std::io::stderr(),
            "xtask new: cargo check of {} generated crates in {} (the first run checks \
             their dependencies in the build directory: minutes)",
            names.len(),
            workspace.display()
        );
        let started = std::time::Instant::now();
        let output = Command::new(&cargo)
            .args([
                "check",
                "--workspace",
                "--all-targets",
                "--message-format",
                "short",
            ])
            .current_dir(&workspace)
            .env("CARGO_TARGET_DIR", target_dir())
            .env_remove("CARGO_MANIFEST_DIR")
            .output()
            .expect("run cargo check");
        let _ = writeln!(
            std::io::stderr(),
            "xtask new: cargo check took {:.0?}",
            started.elapsed()
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        for name in &names {
            assert!(
                output.status.success() && !stderr.contains(&format!("warning: `{name}`")),
                "`cargo check --workspace` in {} failed or `{name}` warned:\n{stderr}",
                workspace.display()
            );
        }
    }
}
