//! The user's function seen as a tool: its parameters sorted into input fields and injected
//! values, its description and its return type.
//!
//! Building this view never fails; everything it notices but cannot accept is reported by
//! `valid.rs`, so that one compile run lists every problem.

use crate::errors::Errors;
use syn::{Attribute, Expr, FnArg, Ident, ItemFn, Lit, LitStr, Meta, Pat, ReturnType, Type};

/// The helper attributes a parameter may carry; all of them are removed before the function
/// is emitted again.
pub(crate) const HELPER_ATTRS: [&str; 3] = ["arg", "input", "inject"];

/// The keys of `#[arg(...)]`.
const ARG_KEYS: [&str; 3] = ["description", "default", "rename"];

/// The function under `#[task_tool]`.
pub(crate) struct TaskFn<'a> {
    /// The function, with its helper attributes already removed.
    pub(crate) original: &'a ItemFn,
    /// Every parameter, in order, including a receiver if there is one.
    pub(crate) params: Vec<Param<'a>>,
    /// The description taken from the function's doc comments.
    pub(crate) doc: Doc,
}

/// One parameter of the function.
pub(crate) struct Param<'a> {
    /// The parameter as written (after helper attributes were removed), for spans.
    pub(crate) original: &'a FnArg,
    /// Where its value comes from.
    pub(crate) kind: ParamKind,
    /// What its helper attributes said.
    pub(crate) attrs: ParamAttrs,
}

/// Where a parameter's value comes from.
pub(crate) enum ParamKind {
    /// `self`, which a tool cannot have.
    Receiver,
    /// A field of the generated input struct.
    Field,
    /// The whole input (`#[input]`).
    WholeInput,
    /// Built from the call's context through `FromTaskContext`.
    Inject(InjectKind),
}

/// What an injected parameter is, for spotting the same value injected twice.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum InjectKind {
    /// One of the runtime's injectable types, recognised by its name.
    Known(&'static str),
    /// A type marked `#[inject]`, compared by its tokens.
    Marked(String),
}

/// The helper attributes found on one parameter.
#[derive(Default)]
pub(crate) struct ParamAttrs {
    /// `#[arg(...)]`.
    pub(crate) arg: Option<ArgAttr>,
    /// `#[input]`.
    pub(crate) input: Option<Attribute>,
    /// `#[inject]`.
    pub(crate) inject: Option<Attribute>,
    /// A `#[cfg(...)]`, which would change the number of arguments behind the macro's back.
    pub(crate) cfg: Option<Attribute>,
}

/// The contents of `#[arg(...)]`.
pub(crate) struct ArgAttr {
    /// The attribute itself, for errors about its placement.
    pub(crate) attr: Attribute,
    /// `description = "..."`.
    pub(crate) description: Option<LitStr>,
    /// `default = <expr>`.
    pub(crate) default: Option<Expr>,
    /// `rename = "..."`.
    pub(crate) rename: Option<LitStr>,
}

/// A description read from doc comments.
pub(crate) enum Doc {
    /// Every doc attribute was a literal: the joined, trimmed text.
    Text(String),
    /// Some doc attribute is a macro call such as `include_str!`: the pieces, joined by
    /// `concat!` at compile time.
    Pieces(Vec<Expr>),
}

impl<'a> TaskFn<'a> {
    /// Sorts the parameters of `original`, whose helper attributes `take_param_attrs` removed.
    pub(crate) fn from_syn(original: &'a ItemFn, attrs: Vec<ParamAttrs>) -> Self {
        let params = original
            .sig
            .inputs
            .iter()
            .zip(attrs)
            .map(|(arg, attrs)| Param::from_syn(arg, attrs))
            .collect();
        TaskFn {
            original,
            params,
            doc: Doc::from_attrs(&original.attrs),
        }
    }

    /// The declared return type, `None` for `()`.
    pub(crate) fn return_type(&self) -> Option<&'a Type> {
        match &self.original.sig.output {
            ReturnType::Default => None,
            ReturnType::Type(_, ty) => Some(ty),
        }
    }
}

impl<'a> Param<'a> {
    fn from_syn(original: &'a FnArg, attrs: ParamAttrs) -> Self {
        let kind = match original {
            FnArg::Receiver(_) => ParamKind::Receiver,
            FnArg::Typed(typed) => {
                if attrs.input.is_some() {
                    ParamKind::WholeInput
                } else if attrs.inject.is_some() {
                    ParamKind::Inject(InjectKind::Marked(type_key(&typed.ty)))
                } else if attrs.arg.is_some() {
                    ParamKind::Field
                } else if is_state(&typed.ty) {
                    // `State<A>` and `State<B>` are different values: compare by tokens.
                    ParamKind::Inject(InjectKind::Marked(type_key(&typed.ty)))
                } else if let Some(name) = known_injection(&typed.ty) {
                    ParamKind::Inject(InjectKind::Known(name))
                } else {
                    ParamKind::Field
                }
            }
        };
        Param {
            original,
            kind,
            attrs,
        }
    }

    /// The parameter's type (`None` for a receiver).
    pub(crate) fn ty(&self) -> Option<&'a Type> {
        match self.original {
            FnArg::Receiver(_) => None,
            FnArg::Typed(typed) => Some(&typed.ty),
        }
    }

    /// The parameter's pattern (`None` for a receiver).
    pub(crate) fn pat(&self) -> Option<&'a Pat> {
        match self.original {
            FnArg::Receiver(_) => None,
            FnArg::Typed(typed) => Some(&typed.pat),
        }
    }

    /// The parameter's name, when its pattern is a plain binding such as `pages` or `mut pages`.
    pub(crate) fn ident(&self) -> Option<&'a Ident> {
        match self.pat()? {
            Pat::Ident(binding) if binding.by_ref.is_none() && binding.subpat.is_none() => {
                Some(&binding.ident)
            }
            _ => None,
        }
    }
}

/// The runtime's injectable types, matched on the last path segment.
const KNOWN_INJECTIONS: [&str; 6] = [
    "Progress",
    "Steps",
    "TaskContext",
    "Client",
    "CancellationToken",
    "Principal",
];

/// Recognises `Progress`, `Steps`, `mcp_tasks::TaskContext`, `Client`, `CancellationToken` or
/// `Principal` by the last segment of the path, the way pyo3 recognises `Python<'py>`; and
/// `Option<Principal>`, the principal of a tool that also takes anonymous calls.
fn known_injection(ty: &Type) -> Option<&'static str> {
    let Type::Path(path) = ungroup(ty) else {
        return None;
    };
    if path.qself.is_some() {
        return None;
    }
    let last = path.path.segments.last()?;
    if last.ident == "Option"
        && let syn::PathArguments::AngleBracketed(a) = &last.arguments
        && let [syn::GenericArgument::Type(inner)] = a.args.iter().collect::<Vec<_>>()[..]
    {
        return (known_injection(inner) == Some("Principal")).then_some("Option<Principal>");
    }
    if !last.arguments.is_none() {
        return None;
    }
    KNOWN_INJECTIONS.into_iter().find(|name| last.ident == name)
}

/// Recognises `State<T>` (application state) by the last segment of its path and its one
/// type argument.
fn is_state(ty: &Type) -> bool {
    let Type::Path(path) = ungroup(ty) else {
        return false;
    };
    if path.qself.is_some() {
        return false;
    }
    path.path.segments.last().is_some_and(|last| {
        last.ident == "State"
            && matches!(&last.arguments, syn::PathArguments::AngleBracketed(a) if a.args.len() == 1)
    })
}

/// Looks through the invisible groups that `macro_rules!` wraps around `$ty` fragments, and
/// through parentheses.
pub(crate) fn ungroup(mut ty: &Type) -> &Type {
    loop {
        match ty {
            Type::Group(group) => ty = &group.elem,
            Type::Paren(paren) => ty = &paren.elem,
            _ => return ty,
        }
    }
}

/// A comparable rendering of a type, for finding a marked type injected twice.
fn type_key(ty: &Type) -> String {
    quote::ToTokens::to_token_stream(ungroup(ty)).to_string()
}

/// `true` for a type spelled `Option<T>` (with any path prefix): such a parameter may be left
/// out of the input.
pub(crate) fn is_option(ty: &Type) -> bool {
    let Type::Path(path) = ungroup(ty) else {
        return false;
    };
    let Some(last) = path.path.segments.last() else {
        return false;
    };
    match &last.arguments {
        syn::PathArguments::AngleBracketed(args) => last.ident == "Option" && args.args.len() == 1,
        _ => false,
    }
}

impl Doc {
    fn from_attrs(attrs: &[Attribute]) -> Self {
        let mut pieces = Vec::new();
        for attr in attrs {
            if let Meta::NameValue(nv) = &attr.meta
                && nv.path.is_ident("doc")
            {
                pieces.push(nv.value.clone());
            }
        }
        let mut lines = Vec::new();
        for piece in &pieces {
            match piece {
                Expr::Lit(syn::ExprLit {
                    lit: Lit::Str(text),
                    ..
                }) => lines.push(text.value()),
                _ => return Doc::Pieces(pieces),
            }
        }
        Doc::Text(join_doc_lines(&lines))
    }
}

/// Joins doc lines the way rustdoc shows them: the one space after `///` dropped, trailing
/// spaces dropped, surrounding blank lines trimmed.
pub(crate) fn join_doc_lines(lines: &[String]) -> String {
    let text = lines
        .iter()
        .flat_map(|line| line.split('\n'))
        .map(|line| line.strip_prefix(' ').unwrap_or(line).trim_end())
        .collect::<Vec<_>>()
        .join("\n");
    text.trim().to_owned()
}

/// Removes the helper attributes (`#[arg]`, `#[input]`, `#[inject]`) from every parameter of
/// `item` and returns what they said, one entry per parameter.
pub(crate) fn take_param_attrs(item: &mut ItemFn, errors: &mut Errors) -> Vec<ParamAttrs> {
    item.sig
        .inputs
        .iter_mut()
        .map(|arg| {
            let attrs = match arg {
                FnArg::Receiver(receiver) => &mut receiver.attrs,
                FnArg::Typed(typed) => &mut typed.attrs,
            };
            let mut found = ParamAttrs::default();
            attrs.retain(|attr| {
                let path = attr.path();
                if path.is_ident("cfg") {
                    found.cfg = Some(attr.clone());
                    return true;
                }
                let Some(name) = HELPER_ATTRS.iter().find(|name| path.is_ident(name)) else {
                    return true;
                };
                let slot = match *name {
                    "arg" => {
                        if let Some(arg) = parse_arg_attr(attr, errors) {
                            if found.arg.is_some() {
                                errors.spanned(attr, "duplicate `#[arg]` attribute");
                            } else {
                                found.arg = Some(arg);
                            }
                        }
                        return false;
                    }
                    "input" => &mut found.input,
                    _ => &mut found.inject,
                };
                if let Meta::List(list) = &attr.meta {
                    let message = format_args!("`#[{name}]` takes no arguments");
                    if list.tokens.is_empty() {
                        errors.spanned(attr, message);
                    } else {
                        errors.spanned(&list.tokens, message);
                    }
                } else if let Meta::NameValue(nv) = &attr.meta {
                    errors.spanned(&nv.value, format_args!("`#[{name}]` takes no arguments"));
                } else if slot.is_some() {
                    errors.spanned(attr, format_args!("duplicate `#[{name}]` attribute"));
                } else {
                    *slot = Some(attr.clone());
                }
                false
            });
            found
        })
        .collect()
}

/// Reads `#[arg]` or `#[arg(description = "...", default = <expr>, rename = "...")]`.
fn parse_arg_attr(attr: &Attribute, errors: &mut Errors) -> Option<ArgAttr> {
    let mut arg = ArgAttr {
        attr: attr.clone(),
        description: None,
        default: None,
        rename: None,
    };
    if let Meta::Path(_) = attr.meta {
        return Some(arg);
    }
    let result = attr.parse_nested_meta(|meta| {
        let key = meta
            .path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        let value: Expr = meta.value()?.parse()?;
        let duplicate = match key.as_str() {
            "description" => arg.description.is_some(),
            "default" => arg.default.is_some(),
            "rename" => arg.rename.is_some(),
            _ => {
                errors.spanned(
                    &meta.path,
                    format_args!(
                        "unknown `#[arg]` argument{}; expected one of: {}",
                        crate::args::named(&key),
                        crate::args::backticked(&ARG_KEYS)
                    ),
                );
                return Ok(());
            }
        };
        if duplicate {
            errors.spanned(&meta.path, format_args!("`{key}` specified more than once"));
            return Ok(());
        }
        match key.as_str() {
            "default" => arg.default = Some(value),
            "description" => arg.description = crate::args::string(&key, value, errors),
            _ => {
                let rename = crate::args::string(&key, value, errors);
                if let Some(lit) = &rename
                    && lit.value().is_empty()
                {
                    errors.spanned(lit, "`rename` cannot be empty");
                }
                arg.rename = rename;
            }
        }
        Ok(())
    });
    match result {
        Ok(()) => Some(arg),
        Err(err) => {
            errors.push(err);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn kinds(mut item: ItemFn) -> Vec<&'static str> {
        let mut errors = Errors::default();
        let attrs = take_param_attrs(&mut item, &mut errors);
        errors.finish().unwrap();
        let task = TaskFn::from_syn(&item, attrs);
        task.params
            .iter()
            .map(|param| match &param.kind {
                ParamKind::Receiver => "self",
                ParamKind::Field => "field",
                ParamKind::WholeInput => "input",
                ParamKind::Inject(InjectKind::Known(name)) => name,
                ParamKind::Inject(InjectKind::Marked(_)) => "marked",
            })
            .collect()
    }

    #[test]
    fn parameters_are_sorted_by_type_name_and_helper_attribute() {
        let item: ItemFn = parse_quote! {
            async fn tool(
                a: u32,
                p: mcp_tasks::Progress,
                cx: TaskContext,
                c: Client,
                t: ::tokio_util::sync::CancellationToken,
                #[inject] db: Db,
                #[arg] progress: Progress,
                g: Option<Progress>,
                who: Principal,
                maybe: Option<mcp_tasks::Principal>,
            ) {}
        };
        assert_eq!(
            kinds(item),
            [
                "field",
                "Progress",
                "TaskContext",
                "Client",
                "CancellationToken",
                "marked",
                "field",
                "field",
                "Principal",
                "Option<Principal>",
            ]
        );
        let item: ItemFn = parse_quote!(
            async fn tool(#[input] args: Args, progress: Progress) {}
        );
        assert_eq!(kinds(item), ["input", "Progress"]);
    }

    #[test]
    fn helper_attributes_are_removed_and_others_kept() {
        let mut item: ItemFn = parse_quote! {
            async fn tool(
                #[arg(description = "d", default = 1 + 1, rename = "n")] #[allow(unused)] n: u32,
                #[inject] db: Db,
            ) {}
        };
        let mut errors = Errors::default();
        let attrs = take_param_attrs(&mut item, &mut errors);
        errors.finish().unwrap();
        let expected: ItemFn = parse_quote!(
            async fn tool(#[allow(unused)] n: u32, db: Db) {}
        );
        // Compared without the punctuation: the input's trailing comma stays.
        let params = |func: &ItemFn| func.sig.inputs.iter().cloned().collect::<Vec<_>>();
        assert_eq!(params(&item), params(&expected));
        let arg = attrs[0].arg.as_ref().unwrap();
        assert_eq!(arg.description.as_ref().unwrap().value(), "d");
        assert_eq!(arg.rename.as_ref().unwrap().value(), "n");
        assert!(arg.default.is_some());
        assert!(attrs[1].inject.is_some());
    }

    #[test]
    fn bad_helper_attributes_are_reported() {
        let mut item: ItemFn = parse_quote! {
            async fn tool(
                #[arg(descr = "d", rename = "a", rename = "b")] n: u32,
                #[input(strict)] args: Args,
                #[arg(rename = "")] m: u32,
            ) {}
        };
        let mut errors = Errors::default();
        take_param_attrs(&mut item, &mut errors);
        let found: Vec<String> = errors
            .finish()
            .unwrap_err()
            .into_iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(
            found,
            [
                "unknown `#[arg]` argument `descr`; expected one of: `description`, `default`, `rename`",
                "`rename` specified more than once",
                "`#[input]` takes no arguments",
                "`rename` cannot be empty",
            ]
        );
    }

    #[test]
    fn doc_lines_are_joined_and_trimmed() {
        let lines = [
            "",
            " Render a report.",
            "",
            " Pages come   ",
            " in order.",
            "",
        ]
        .map(String::from);
        assert_eq!(
            join_doc_lines(&lines),
            "Render a report.\n\nPages come\nin order."
        );
        let block = ["\n Block doc.\n   Indented.\n".to_owned()];
        assert_eq!(join_doc_lines(&block), "Block doc.\n  Indented.");
    }

    #[test]
    fn option_is_recognised_by_its_spelling() {
        assert!(is_option(&parse_quote!(Option<u32>)));
        assert!(is_option(&parse_quote!(::std::option::Option<String>)));
        assert!(!is_option(&parse_quote!(Option)));
        assert!(!is_option(&parse_quote!(Vec<Option<u32>>)));
    }
}
