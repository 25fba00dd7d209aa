//! Every check on the function and on how it combines with the attribute's arguments.
//!
//! Each error points at the smallest token that is wrong, and all of them are reported
//! together.

use crate::args::TaskToolArgs;
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
        {
            errors.spanned(
                lit,
                "`on_restart = \"rerun\"` requires `idempotent`: only an idempotent tool can safely run again",
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
        let rerun = "`on_restart = \"rerun\"` requires `idempotent`: only an idempotent tool can safely run again";
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
