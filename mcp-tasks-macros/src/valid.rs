//! Every check on the function and on how it combines with the attribute's arguments.
//!
//! Each error points at the smallest token that is wrong, and all of them are reported
//! together.

use crate::args::{Mode, TaskToolArgs, backticked};
use crate::ast::{InjectKind, ParamKind, TaskFn, ungroup};
use crate::errors::Errors;
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::{FnArg, Type};

impl TaskFn<'_> {
    /// Checks the function and its parameters against what a tool can be.
    pub(crate) fn validate(&self, args: &TaskToolArgs, errors: &mut Errors) {
        self.validate_signature(errors);
        self.validate_params(errors);
        if let Some((true, lit)) = &args.on_restart
            && args.idempotent != Some(true)
            && !self.takes_steps()
        {
            errors.spanned(
                lit,
                "`on_restart = \"rerun\"` requires `idempotent` or a `Steps` parameter: only an idempotent tool, or one made of durable steps, can safely run again",
            );
        }
        if let Some((true, lit)) = &args.on_unresumable
            && args.idempotent != Some(true)
        {
            errors.spanned(
                lit,
                "`on_unresumable = \"rerun\"` requires `idempotent`: only an idempotent tool can safely run again from the start",
            );
        }
        self.validate_unique(args, errors);
    }

    /// `true` when the function takes `Steps`: the tool is made of durable steps.
    pub(crate) fn takes_steps(&self) -> bool {
        self.params
            .iter()
            .any(|param| matches!(param.kind, ParamKind::Inject(InjectKind::Known("Steps"))))
    }

    /// The names of the tool's input fields (renamed ones by their new name); `None` when
    /// an `#[input]` parameter takes the whole input, whose fields the macro cannot see.
    fn field_names(&self) -> Option<Vec<String>> {
        let mut names = Vec::new();
        for param in &self.params {
            match param.kind {
                ParamKind::WholeInput => return None,
                ParamKind::Field => {
                    let rename = param.attrs.arg.as_ref().and_then(|arg| arg.rename.as_ref());
                    match (rename, param.ident()) {
                        (Some(lit), _) => names.push(lit.value()),
                        (None, Some(ident)) => names.push(ident.unraw().to_string()),
                        (None, None) => {}
                    }
                }
                _ => {}
            }
        }
        Some(names)
    }

    /// `unique` names arguments the tool has, on a tool that runs as a task; `unique_window`
    /// comes with `unique`.
    fn validate_unique(&self, args: &TaskToolArgs, errors: &mut Errors) {
        let Some(unique) = &args.unique else {
            if let Some((_, lit)) = &args.unique_window {
                errors.spanned(
                    lit,
                    "`unique_window` applies to a unique tool: add `unique` (all arguments) or `unique = [\"...\"]` (those named)",
                );
            }
            return;
        };
        if args.mode == Some(Mode::Forbidden) {
            errors.spanned(
                &unique.key,
                "`unique` needs a tool that runs as a task, and `mode = \"forbidden\"` never does: only a task can be handed back to an equal call",
            );
        }
        let (Some(names), Some(fields)) = (&unique.args, self.field_names()) else {
            return;
        };
        for lit in names {
            let name = lit.value();
            if fields.contains(&name) {
                continue;
            }
            let known = if fields.is_empty() {
                "the tool has no arguments".to_owned()
            } else {
                let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
                format!("the tool's arguments are {}", backticked(&fields))
            };
            errors.spanned(
                lit,
                format_args!(
                    "`unique` names {name:?}, which is not an argument of the tool; {known}"
                ),
            );
        }
    }

    fn validate_signature(&self, errors: &mut Errors) {
        let sig = &self.original.sig;
        match (&sig.constness, &sig.asyncness) {
            (Some(constness), None) => errors.spanned(
                constness,
                "`#[task_tool]` requires an `async fn`, not a `const fn`",
            ),
            (Some(constness), Some(_)) => {
                errors.spanned(constness, "`#[task_tool]` functions cannot be `const`");
            }
            (None, None) => errors.spanned(sig.fn_token, "`#[task_tool]` requires an `async fn`"),
            (None, Some(_)) => {}
        }
        if let Some(unsafety) = &sig.unsafety {
            errors.spanned(unsafety, "`#[task_tool]` functions cannot be `unsafe`");
        }
        if let Some(abi) = &sig.abi {
            errors.spanned(abi, "`#[task_tool]` functions cannot have an `extern` ABI");
        }
        if let Some(variadic) = &sig.variadic {
            errors.spanned(variadic, "`#[task_tool]` functions cannot be variadic");
        }
        if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
            errors.spanned(
                &sig.generics,
                "`#[task_tool]` functions cannot be generic: the tool's schema needs concrete types",
            );
        }
        if let Some(ty) = self.return_type()
            && let Type::ImplTrait(_) = ungroup(ty)
        {
            errors.spanned(
                ty,
                "`#[task_tool]` cannot name an `impl Trait` return type; return a concrete type",
            );
        }
    }

    fn validate_params(&self, errors: &mut Errors) {
        let mut injected: Vec<&InjectKind> = Vec::new();
        let mut whole_input = false;
        let mut field_names: Vec<String> = Vec::new();
        for param in &self.params {
            if let Some(cfg) = &param.attrs.cfg {
                errors.spanned(
                    cfg,
                    "`#[cfg]` on a `#[task_tool]` parameter is not supported",
                );
            }
            let attrs = &param.attrs;
            if let (Some(_), Some(inject)) = (&attrs.input, &attrs.inject) {
                errors.spanned(
                    inject,
                    "a parameter cannot be both `#[input]` and `#[inject]`",
                );
            }
            if let Some(arg) = &attrs.arg
                && (attrs.input.is_some() || attrs.inject.is_some())
            {
                let other = if attrs.input.is_some() {
                    "input"
                } else {
                    "inject"
                };
                errors.spanned(
                    &arg.attr,
                    format_args!("`#[arg]` describes an input field; it does not apply to an `#[{other}]` parameter"),
                );
            }
            let (Some(ty), Some(pat)) = (param.ty(), param.pat()) else {
                if let FnArg::Receiver(receiver) = param.original {
                    errors.spanned(
                        receiver,
                        "`#[task_tool]` functions cannot take `self`; use a free function",
                    );
                }
                continue;
            };
            match ungroup(ty) {
                Type::ImplTrait(_) => errors.spanned(
                    ty,
                    "`#[task_tool]` parameters cannot be `impl Trait`; use a concrete type",
                ),
                Type::Reference(reference) => errors.spanned(
                    reference.and_token,
                    "`#[task_tool]` parameters are passed by value; take an owned type",
                ),
                _ => {}
            }
            match &param.kind {
                ParamKind::Receiver => {}
                ParamKind::Inject(kind) => {
                    if injected.contains(&kind) {
                        errors.spanned(
                            ty,
                            format_args!(
                                "`{}` is injected more than once",
                                ty.to_token_stream().to_string().replace(' ', "")
                            ),
                        );
                    } else {
                        injected.push(kind);
                    }
                }
                ParamKind::WholeInput => {
                    if whole_input {
                        errors.spanned(&param.attrs.input, "only one parameter can be `#[input]`");
                    }
                    whole_input = true;
                }
                ParamKind::Field => {
                    let Some(ident) = param.ident() else {
                        errors.spanned(
                            pat,
                            "patterns are not supported for input parameters; name the parameter, or take the whole input with `#[input]`",
                        );
                        continue;
                    };
                    let rename = param.attrs.arg.as_ref().and_then(|arg| arg.rename.as_ref());
                    let name = rename.map_or_else(|| ident.unraw().to_string(), |lit| lit.value());
                    if field_names.contains(&name) {
                        match rename {
                            Some(lit) => errors
                                .spanned(lit, format_args!("two input fields are named {name:?}")),
                            None => errors.spanned(
                                ident,
                                format_args!("two input fields are named {name:?}"),
                            ),
                        }
                    }
                    field_names.push(name);
                }
            }
        }
        if whole_input {
            for param in &self.params {
                if let ParamKind::Field = param.kind {
                    errors.spanned(
                        param.original,
                        "an `#[input]` parameter takes the whole input, so no other parameter can be an input field; inject it with `#[inject]` or move it into the input type",
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proc_macro2::TokenStream;
    use quote::quote;

    fn errors(args: TokenStream, item: TokenStream) -> Vec<String> {
        let mut func = syn::parse2(item).unwrap();
        match crate::expand::generate(args, &mut func) {
            Ok(_) => Vec::new(),
            Err(err) => err.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn a_valid_tool_has_no_errors() {
        let item = quote! {
            async fn r#type(n: u32, p: Progress, #[inject] db: Db, #[arg(rename = "m")] m2: u8) {}
        };
        assert_eq!(errors(quote!(), item), Vec::<String>::new());
    }

    #[test]
    fn every_signature_problem_is_reported_at_once() {
        let item = quote! {
            const unsafe extern "C" fn tool<T>(x: impl Into<String>, y: &str) -> impl Sized {}
        };
        assert_eq!(
            errors(quote!(), item),
            [
                "`#[task_tool]` requires an `async fn`, not a `const fn`",
                "`#[task_tool]` functions cannot be `unsafe`",
                "`#[task_tool]` functions cannot have an `extern` ABI",
                "`#[task_tool]` functions cannot be generic: the tool's schema needs concrete types",
                "`#[task_tool]` cannot name an `impl Trait` return type; return a concrete type",
                "`#[task_tool]` parameters cannot be `impl Trait`; use a concrete type",
                "`#[task_tool]` parameters are passed by value; take an owned type",
            ]
        );
        assert_eq!(
            errors(
                quote!(),
                quote!(
                    fn tool(&self)
                    where
                        u8: Copy,
                    {
                    }
                )
            ),
            [
                "`#[task_tool]` requires an `async fn`",
                "`#[task_tool]` functions cannot be generic: the tool's schema needs concrete types",
                "`#[task_tool]` functions cannot take `self`; use a free function",
            ]
        );
    }

    #[test]
    fn argument_and_function_errors_are_combined() {
        assert_eq!(
            errors(
                quote!(mode = "x"),
                quote!(
                    fn tool() {}
                )
            ),
            [
                "invalid `mode` \"x\": expected `\"forbidden\"`, `\"optional\"` or `\"required\"`",
                "`#[task_tool]` requires an `async fn`",
            ]
        );
    }

    #[test]
    fn parameter_problems_point_at_the_parameter() {
        let item = quote! {
            async fn tool(
                (a, b): (u32, u32),
                p: Progress,
                q: mcp_tasks::Progress,
                #[arg(rename = "n")] m: u32,
                n: u32,
                #[cfg(test)] c: u32,
                #[arg] #[inject] d: Db,
            ) {}
        };
        assert_eq!(
            errors(quote!(), item),
            [
                "patterns are not supported for input parameters; name the parameter, or take the whole input with `#[input]`",
                "`mcp_tasks::Progress` is injected more than once",
                "two input fields are named \"n\"",
                "`#[cfg]` on a `#[task_tool]` parameter is not supported",
                "`#[arg]` describes an input field; it does not apply to an `#[inject]` parameter",
            ]
        );
    }

    #[test]
    fn whole_input_excludes_input_fields() {
        let item = quote! {
            async fn tool(#[input] a: A, p: Progress, extra: u32, #[input] b: B) {}
        };
        assert_eq!(
            errors(quote!(), item),
            [
                "only one parameter can be `#[input]`",
                "an `#[input]` parameter takes the whole input, so no other parameter can be an input field; inject it with `#[inject]` or move it into the input type",
            ]
        );
        let item = quote!(
            async fn tool(
                #[input]
                #[inject]
                a: A,
            ) {
            }
        );
        assert_eq!(
            errors(quote!(), item),
            ["a parameter cannot be both `#[input]` and `#[inject]`"]
        );
    }

    #[test]
    fn rerun_needs_idempotent() {
        let rerun = "`on_restart = \"rerun\"` requires `idempotent` or a `Steps` parameter: only an idempotent tool, or one made of durable steps, can safely run again";
        let item = quote!(
            async fn tool() {}
        );
        assert_eq!(errors(quote!(on_restart = "rerun"), item.clone()), [rerun]);
        assert_eq!(
            errors(
                quote!(on_restart = "rerun", idempotent = false),
                item.clone()
            ),
            [rerun]
        );
        assert!(errors(quote!(on_restart = "rerun", idempotent), item.clone()).is_empty());
        assert!(errors(quote!(on_restart = "fail"), item).is_empty());
        let steps = quote!(
            async fn tool(steps: Steps) {}
        );
        assert!(errors(quote!(on_restart = "rerun"), steps).is_empty());
    }

    #[test]
    fn unique_names_arguments_of_a_task_tool() {
        let item = quote!(
            async fn tool(index: String, #[arg(rename = "tenant")] t: String, p: Progress) {}
        );
        assert!(errors(quote!(unique = ["index", "tenant"]), item.clone()).is_empty());
        assert!(errors(quote!(unique, unique_window = "1h"), item.clone()).is_empty());
        assert_eq!(
            errors(quote!(unique = ["index", "t", "p"]), item.clone()),
            [
                "`unique` names \"t\", which is not an argument of the tool; the tool's arguments are `index`, `tenant`",
                "`unique` names \"p\", which is not an argument of the tool; the tool's arguments are `index`, `tenant`",
            ]
        );
        assert_eq!(
            errors(
                quote!(unique = ["x"]),
                quote!(
                    async fn tool() {}
                )
            ),
            [
                "`unique` names \"x\", which is not an argument of the tool; the tool has no arguments"
            ]
        );
        // The fields of a whole input are checked when the server is built.
        assert!(
            errors(
                quote!(unique = ["x"]),
                quote!(
                    async fn tool(#[input] a: A) {}
                )
            )
            .is_empty()
        );
        assert_eq!(
            errors(quote!(mode = "forbidden", unique), item.clone()),
            [
                "`unique` needs a tool that runs as a task, and `mode = \"forbidden\"` never does: only a task can be handed back to an equal call"
            ]
        );
        assert_eq!(
            errors(quote!(unique_window = "1h"), item),
            [
                "`unique_window` applies to a unique tool: add `unique` (all arguments) or `unique = [\"...\"]` (those named)"
            ]
        );
    }

    #[test]
    fn rerun_of_an_unresumable_call_needs_idempotent() {
        let rerun = "`on_unresumable = \"rerun\"` requires `idempotent`: only an idempotent tool can safely run again from the start";
        let item = quote!(
            async fn tool() {}
        );
        assert_eq!(
            errors(quote!(on_unresumable = "rerun"), item.clone()),
            [rerun]
        );
        assert_eq!(
            errors(
                quote!(on_unresumable = "rerun", on_restart = "rerun"),
                item.clone()
            )
            .len(),
            2,
            "each policy is checked on its own"
        );
        assert!(errors(quote!(on_unresumable = "rerun", idempotent), item.clone()).is_empty());
        assert!(errors(quote!(on_unresumable = "fail"), item).is_empty());
    }
}
