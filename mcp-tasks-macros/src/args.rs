//! The arguments of `#[task_tool(...)]`: parsed, and checked one by one (formats and ranges).
//! Checks that involve two arguments, or the function, live in `valid.rs`.

use crate::duration::{self, DurationError};
use crate::errors::Errors;
use proc_macro2::TokenStream;
use syn::parse::Parser;
use syn::{Expr, Lit, LitStr, Path};

/// Every argument `#[task_tool]` accepts, in the order the manual lists them.
pub(crate) const KEYS: [&str; 17] = [
    "mode",
    "poll_interval",
    "ttl",
    "name",
    "title",
    "description",
    "read_only",
    "destructive",
    "idempotent",
    "open_world",
    "on_restart",
    "on_unresumable",
    "prelude",
    "unique",
    "unique_window",
    "scopes",
    "crate",
];

/// The parsed arguments of one `#[task_tool(...)]`.
#[derive(Default)]
pub(crate) struct TaskToolArgs {
    /// `mode = "..."`: the `TaskSupport` variant.
    pub(crate) mode: Option<Mode>,
    /// `poll_interval = "..."`, in milliseconds.
    pub(crate) poll_interval_ms: Option<u64>,
    /// `ttl = "..."`: `Some(None)` for `"none"`.
    pub(crate) ttl_ms: Option<Option<u64>>,
    /// `name = "..."`; the generated code checks it against the runtime's tool-name rule.
    pub(crate) name: Option<LitStr>,
    /// `title = "..."`.
    pub(crate) title: Option<LitStr>,
    /// `description = "..."`.
    pub(crate) description: Option<LitStr>,
    /// `read_only`.
    pub(crate) read_only: Option<bool>,
    /// `destructive`.
    pub(crate) destructive: Option<bool>,
    /// `idempotent`.
    pub(crate) idempotent: Option<bool>,
    /// `open_world`.
    pub(crate) open_world: Option<bool>,
    /// `on_restart = "..."`: whether to rerun, and the literal for errors.
    pub(crate) on_restart: Option<(bool, LitStr)>,
    /// `on_unresumable = "..."`: whether to rerun a call that can no longer be resumed, and
    /// the literal for errors.
    pub(crate) on_unresumable: Option<(bool, LitStr)>,
    /// `prelude`: the call runs inline until it awaits `detach()`.
    pub(crate) prelude: Option<bool>,
    /// `unique` (every argument) or `unique = ["a", "b"]` (those named).
    pub(crate) unique: Option<Unique>,
    /// `unique_window = "..."`, in milliseconds, with the literal for errors.
    pub(crate) unique_window: Option<(u64, LitStr)>,
    /// `scopes = ["a", "b"]`: what a caller's principal must hold.
    pub(crate) scopes: Option<Vec<LitStr>>,
    /// `crate = path`.
    pub(crate) krate: Option<Path>,
}

/// `unique`, as written.
pub(crate) struct Unique {
    /// The `unique` key, for errors about the whole argument.
    pub(crate) key: Path,
    /// `None` for a bare `unique` (every argument); the names of `unique = [...]`.
    pub(crate) args: Option<Vec<LitStr>>,
}

/// The three task modes of the spec's `taskSupport`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `"forbidden"`.
    Forbidden,
    /// `"optional"`.
    Optional,
    /// `"required"`.
    Required,
}

impl Mode {
    /// The name of the `TaskSupport` variant.
    pub(crate) fn variant(self) -> &'static str {
        match self {
            Mode::Forbidden => "Forbidden",
            Mode::Optional => "Optional",
            Mode::Required => "Required",
        }
    }
}

/// Parses the attribute's arguments, collecting every error; stops early only when the
/// tokens themselves cannot be read.
pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> TaskToolArgs {
    let mut args = TaskToolArgs::default();
    let mut seen: Vec<String> = Vec::new();
    let parser = syn::meta::parser(|meta| {
        let key = meta
            .path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        // Read the whole value first, so that a wrong value is reported without losing the
        // arguments after it.
        let value: Option<Expr> = if meta.input.peek(syn::Token![=]) {
            Some(meta.value()?.parse()?)
        } else if meta.input.is_empty() || meta.input.peek(syn::Token![,]) {
            None
        } else {
            return Err(meta.error(format_args!("expected `=` after `{key}`")));
        };
        if !KEYS.contains(&key.as_str()) {
            errors.spanned(
                &meta.path,
                format_args!(
                    "unknown `#[task_tool]` argument{}; expected one of: {}",
                    named(&key),
                    backticked(&KEYS)
                ),
            );
            return Ok(());
        }
        if seen.contains(&key) {
            errors.spanned(&meta.path, format_args!("`{key}` specified more than once"));
            return Ok(());
        }
        seen.push(key.clone());
        let Some(value) = value else {
            match key.as_str() {
                "read_only" => args.read_only = Some(true),
                "destructive" => args.destructive = Some(true),
                "idempotent" => args.idempotent = Some(true),
                "open_world" => args.open_world = Some(true),
                "prelude" => args.prelude = Some(true),
                "unique" => {
                    args.unique = Some(Unique {
                        key: meta.path.clone(),
                        args: None,
                    });
                }
                _ => errors.spanned(
                    &meta.path,
                    format_args!("`{key}` needs a value: `{key} = {}`", example(&key)),
                ),
            }
            return Ok(());
        };
        if key == "scopes" {
            args.scopes = scopes(value, errors);
            return Ok(());
        }
        if key == "unique" {
            args.unique = unique_args(value, errors).map(|names| Unique {
                key: meta.path.clone(),
                args: Some(names),
            });
            return Ok(());
        }
        args.set(&key, value, errors);
        Ok(())
    });
    if let Err(err) = parser.parse2(tokens) {
        errors.push(err);
    }
    args
}

impl TaskToolArgs {
    fn set(&mut self, key: &str, value: Expr, errors: &mut Errors) {
        match key {
            "mode" => self.mode = string(key, value, errors).and_then(|lit| mode(&lit, errors)),
            "poll_interval" => {
                self.poll_interval_ms =
                    string(key, value, errors).and_then(|lit| millis(key, &lit, errors));
            }
            "ttl" => {
                self.ttl_ms = string(key, value, errors).and_then(|lit| {
                    if lit.value() == "none" {
                        Some(None)
                    } else {
                        millis(key, &lit, errors).map(Some)
                    }
                });
            }
            "name" => self.name = string(key, value, errors),
            "title" => self.title = string(key, value, errors),
            "description" => self.description = string(key, value, errors),
            "read_only" => self.read_only = boolean(key, value, errors),
            "destructive" => self.destructive = boolean(key, value, errors),
            "idempotent" => self.idempotent = boolean(key, value, errors),
            "open_world" => self.open_world = boolean(key, value, errors),
            "prelude" => self.prelude = boolean(key, value, errors),
            "on_restart" => self.on_restart = fail_or_rerun(key, value, errors),
            "on_unresumable" => self.on_unresumable = fail_or_rerun(key, value, errors),
            "unique_window" => {
                self.unique_window = string(key, value, errors)
                    .and_then(|lit| millis(key, &lit, errors).map(|ms| (ms, lit)));
            }
            _ => self.krate = path(value, errors),
        }
    }
}

/// Reads `"fail"` (`false`) or `"rerun"` (`true`), keeping the literal for later errors.
fn fail_or_rerun(key: &str, value: Expr, errors: &mut Errors) -> Option<(bool, LitStr)> {
    let lit = string(key, value, errors)?;
    match lit.value().as_str() {
        "fail" => Some((false, lit)),
        "rerun" => Some((true, lit)),
        other => {
            errors.spanned(
                &lit,
                format_args!("invalid `{key}` {other:?}: expected `\"fail\"` or `\"rerun\"`"),
            );
            None
        }
    }
}

/// Reads the list of `unique = ["a", "b"]`: string literals, at least one, each once.
fn unique_args(value: Expr, errors: &mut Errors) -> Option<Vec<LitStr>> {
    let Expr::Array(array) = value else {
        errors.spanned(
            value,
            "`unique` expects a list of argument names, `unique = [\"index\"]`, or no value for all of them",
        );
        return None;
    };
    if array.elems.is_empty() {
        errors.spanned(
            &array,
            "`unique = []` names no argument: name at least one, or write `unique` alone to compare all of them",
        );
        return None;
    }
    let mut names: Vec<LitStr> = Vec::new();
    let mut ok = true;
    for elem in array.elems {
        match elem {
            Expr::Lit(syn::ExprLit {
                lit: Lit::Str(lit), ..
            }) => {
                if names.iter().any(|seen| seen.value() == lit.value()) {
                    errors.spanned(
                        &lit,
                        format_args!("`unique` names the argument {:?} twice", lit.value()),
                    );
                    ok = false;
                } else {
                    names.push(lit);
                }
            }
            other => {
                errors.spanned(
                    other,
                    "`unique` lists argument names as string literals, `unique = [\"index\"]`",
                );
                ok = false;
            }
        }
    }
    ok.then_some(names)
}

/// Reads the list of `scopes = ["a", "b"]`: string literals, at least one, each a scope
/// (non-empty, no whitespace) named once.
fn scopes(value: Expr, errors: &mut Errors) -> Option<Vec<LitStr>> {
    let Expr::Array(array) = value else {
        errors.spanned(
            value,
            "`scopes` expects a list of OAuth scopes, `scopes = [\"reports:write\"]`",
        );
        return None;
    };
    if array.elems.is_empty() {
        errors.spanned(
            &array,
            "`scopes = []` names no scope: name at least one, or leave `scopes` out for a tool anyone may call",
        );
        return None;
    }
    let mut scopes: Vec<LitStr> = Vec::new();
    let mut ok = true;
    for elem in array.elems {
        let Expr::Lit(syn::ExprLit {
            lit: Lit::Str(lit), ..
        }) = elem
        else {
            errors.spanned(
                elem,
                "`scopes` lists scopes as string literals, `scopes = [\"reports:write\"]`",
            );
            ok = false;
            continue;
        };
        let scope = lit.value();
        let problem = if scope.is_empty() {
            Some("an empty string is not a scope".to_owned())
        } else if scope.chars().any(char::is_whitespace) {
            Some(format!(
                "{scope:?} is not a scope: a scope holds no whitespace (list each scope on its own)"
            ))
        } else if scopes.iter().any(|seen| seen.value() == scope) {
            Some(format!("`scopes` names {scope:?} twice"))
        } else {
            None
        };
        match problem {
            Some(problem) => {
                errors.spanned(&lit, problem);
                ok = false;
            }
            None => scopes.push(lit),
        }
    }
    ok.then_some(scopes)
}

/// An example value, for the "needs a value" error.
fn example(key: &str) -> &'static str {
    match key {
        "mode" => "\"optional\"",
        "poll_interval" => "\"2s\"",
        "ttl" | "unique_window" => "\"1h\"",
        "scopes" => "[\"reports:write\"]",
        "on_restart" | "on_unresumable" => "\"fail\"",
        "crate" => "::mcp_tasks",
        _ => "\"...\"",
    }
}

/// Reads a string literal value.
pub(crate) fn string(key: &str, value: Expr, errors: &mut Errors) -> Option<LitStr> {
    match value {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Str(lit), ..
        }) => Some(lit),
        other => {
            errors.spanned(other, format_args!("`{key}` expects a string literal"));
            None
        }
    }
}

/// Reads `true` or `false`.
fn boolean(key: &str, value: Expr, errors: &mut Errors) -> Option<bool> {
    match value {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Bool(lit),
            ..
        }) => Some(lit.value),
        other => {
            errors.spanned(other, format_args!("`{key}` expects `true` or `false`"));
            None
        }
    }
}

/// Reads `crate = some::path` (or the string form `crate = "some::path"`).
fn path(value: Expr, errors: &mut Errors) -> Option<Path> {
    match value {
        Expr::Path(expr) if expr.qself.is_none() && expr.attrs.is_empty() => Some(expr.path),
        Expr::Lit(syn::ExprLit {
            lit: Lit::Str(lit), ..
        }) => match lit.parse() {
            Ok(path) => Some(path),
            Err(_) => {
                errors.spanned(&lit, "`crate` expects a path such as `::mcp_tasks`");
                None
            }
        },
        other => {
            errors.spanned(other, "`crate` expects a path such as `::mcp_tasks`");
            None
        }
    }
}

fn mode(lit: &LitStr, errors: &mut Errors) -> Option<Mode> {
    match lit.value().as_str() {
        "forbidden" => Some(Mode::Forbidden),
        "optional" => Some(Mode::Optional),
        "required" => Some(Mode::Required),
        other => {
            errors.spanned(
                lit,
                format_args!(
                    "invalid `mode` {other:?}: expected `\"forbidden\"`, `\"optional\"` or `\"required\"`"
                ),
            );
            None
        }
    }
}

fn millis(key: &str, lit: &LitStr, errors: &mut Errors) -> Option<u64> {
    let text = lit.value();
    match duration::parse_millis(&text) {
        Ok(millis) => Some(millis),
        Err(DurationError::Zero) => {
            errors.spanned(lit, format_args!("`{key}` must be greater than zero"));
            None
        }
        Err(DurationError::TooLong) => {
            errors.spanned(lit, format_args!("`{key}` {text:?} is too long"));
            None
        }
        Err(DurationError::Malformed) => {
            let none = if key == "ttl" { "`\"none\"` or " } else { "" };
            errors.spanned(
                lit,
                format_args!(
                    "invalid `{key}` {text:?}: expected {none}a number followed by {}",
                    duration::UNITS
                ),
            );
            None
        }
    }
}

/// " `key`", or nothing when the key is not a plain identifier.
pub(crate) fn named(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!(" `{key}`")
    }
}

/// `a`, `b` → "`a`, `b`".
pub(crate) fn backticked(keys: &[&str]) -> String {
    keys.iter()
        .map(|key| format!("`{key}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn parse_ok(tokens: TokenStream) -> TaskToolArgs {
        let mut errors = Errors::default();
        let args = parse(tokens, &mut errors);
        errors.finish().unwrap();
        args
    }

    fn messages(tokens: TokenStream) -> Vec<String> {
        let mut errors = Errors::default();
        parse(tokens, &mut errors);
        match errors.finish() {
            Ok(()) => Vec::new(),
            Err(err) => err.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn no_arguments_means_every_default() {
        let args = parse_ok(quote!());
        assert!(args.mode.is_none() && args.poll_interval_ms.is_none() && args.ttl_ms.is_none());
        assert!(args.name.is_none() && args.krate.is_none() && args.on_restart.is_none());
        assert!(args.on_unresumable.is_none());
    }

    #[test]
    fn every_key_is_read() {
        let args = parse_ok(quote!(
            mode = "required",
            poll_interval = "250ms",
            ttl = "none",
            name = "a.b-c_d",
            title = "T",
            description = "D",
            read_only,
            destructive = false,
            idempotent = true,
            open_world,
            on_restart = "rerun",
            on_unresumable = "rerun",
            crate = crate::rt,
        ));
        assert_eq!(args.mode, Some(Mode::Required));
        assert_eq!(args.poll_interval_ms, Some(250));
        assert_eq!(args.ttl_ms, Some(None));
        assert_eq!(args.name.unwrap().value(), "a.b-c_d");
        assert_eq!(args.title.unwrap().value(), "T");
        assert_eq!(args.description.unwrap().value(), "D");
        assert_eq!(args.read_only, Some(true));
        assert_eq!(args.destructive, Some(false));
        assert_eq!(args.idempotent, Some(true));
        assert_eq!(args.open_world, Some(true));
        assert!(args.on_restart.unwrap().0);
        assert!(args.on_unresumable.unwrap().0);
        assert!(args.krate.unwrap().segments.len() == 2);
    }

    #[test]
    fn crate_accepts_a_string_too() {
        let args = parse_ok(quote!(crate = "::my_facade::inner"));
        let krate = args.krate.unwrap();
        assert!(krate.leading_colon.is_some());
        assert_eq!(krate.segments.len(), 2);
    }

    #[test]
    fn every_bad_argument_is_reported_at_once() {
        let found = messages(quote!(
            mode = "sometimes",
            poll_interval = "0s",
            ttl = "2 days",
            colour = "red",
            mode = "optional",
            read_only = "yes",
            on_restart = "retry",
            on_unresumable = "resume",
        ));
        assert_eq!(
            found,
            [
                "invalid `mode` \"sometimes\": expected `\"forbidden\"`, `\"optional\"` or `\"required\"`",
                "`poll_interval` must be greater than zero",
                "invalid `ttl` \"2 days\": expected `\"none\"` or a number followed by `ms`, `s`, `m` or `h`",
                "unknown `#[task_tool]` argument `colour`; expected one of: `mode`, `poll_interval`, `ttl`, `name`, `title`, `description`, `read_only`, `destructive`, `idempotent`, `open_world`, `on_restart`, `on_unresumable`, `prelude`, `unique`, `unique_window`, `scopes`, `crate`",
                "`mode` specified more than once",
                "`read_only` expects `true` or `false`",
                "invalid `on_restart` \"retry\": expected `\"fail\"` or `\"rerun\"`",
                "invalid `on_unresumable` \"resume\": expected `\"fail\"` or `\"rerun\"`",
            ]
        );
    }

    #[test]
    fn values_must_have_the_right_shape() {
        assert_eq!(
            messages(quote!(mode)),
            ["`mode` needs a value: `mode = \"optional\"`"]
        );
        assert_eq!(
            messages(quote!(ttl = 60)),
            ["`ttl` expects a string literal"]
        );
        assert_eq!(
            messages(quote!(crate = 1)),
            ["`crate` expects a path such as `::mcp_tasks`"]
        );
        assert_eq!(messages(quote!(mode("x"))), ["expected `=` after `mode`"]);
    }

    #[test]
    fn unique_takes_no_value_or_a_list_of_names() {
        let all = parse_ok(quote!(unique, unique_window = "90m"));
        assert!(all.unique.unwrap().args.is_none());
        assert_eq!(all.unique_window.unwrap().0, 90 * 60 * 1000);
        let some = parse_ok(quote!(unique = ["index", "tenant"]));
        let names: Vec<String> = some
            .unique
            .unwrap()
            .args
            .unwrap()
            .iter()
            .map(LitStr::value)
            .collect();
        assert_eq!(names, ["index", "tenant"]);
    }

    #[test]
    fn scopes_are_a_list_of_scopes() {
        let ok = parse_ok(quote!(scopes = ["reports:write", "reports:read"]));
        let scopes: Vec<String> = ok.scopes.unwrap().iter().map(LitStr::value).collect();
        assert_eq!(scopes, ["reports:write", "reports:read"]);
        assert_eq!(
            messages(quote!(scopes = ["a b", "", 7, "c", "c"])),
            [
                "\"a b\" is not a scope: a scope holds no whitespace (list each scope on its own)",
                "an empty string is not a scope",
                "`scopes` lists scopes as string literals, `scopes = [\"reports:write\"]`",
                "`scopes` names \"c\" twice",
            ]
        );
        assert_eq!(
            messages(quote!(scopes = [])),
            [
                "`scopes = []` names no scope: name at least one, or leave `scopes` out for a tool anyone may call"
            ]
        );
        assert_eq!(
            messages(quote!(scopes = "reports:write")),
            ["`scopes` expects a list of OAuth scopes, `scopes = [\"reports:write\"]`"]
        );
        assert_eq!(
            messages(quote!(scopes)),
            ["`scopes` needs a value: `scopes = [\"reports:write\"]`"]
        );
    }

    #[test]
    fn a_bad_unique_list_is_reported_element_by_element() {
        assert_eq!(
            messages(quote!(unique = [])),
            [
                "`unique = []` names no argument: name at least one, or write `unique` alone to compare all of them"
            ]
        );
        assert_eq!(
            messages(quote!(unique = ["a", 1, "b", "a"])),
            [
                "`unique` lists argument names as string literals, `unique = [\"index\"]`",
                "`unique` names the argument \"a\" twice",
            ]
        );
        assert_eq!(
            messages(quote!(unique = "index")),
            [
                "`unique` expects a list of argument names, `unique = [\"index\"]`, or no value for all of them"
            ]
        );
        assert_eq!(
            messages(quote!(unique_window = "soon")),
            [
                "invalid `unique_window` \"soon\": expected a number followed by `ms`, `s`, `m` or `h`"
            ]
        );
        assert_eq!(
            messages(quote!(unique_window)),
            ["`unique_window` needs a value: `unique_window = \"1h\"`"]
        );
    }
}
