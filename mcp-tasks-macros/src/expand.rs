//! The pipeline (arguments → function → validation → expansion) and the generated code.
//!
//! The user's function is emitted again untouched, apart from its helper attributes, so that
//! it stays callable from unit tests. Everything generated lives in a `const _: () = { ... };`
//! block so that no helper name leaks into the user's module, and names the runtime only
//! through `<crate>::__private`.

use crate::args::{self, Mode, TaskToolArgs};
use crate::ast::{self, Doc, ParamKind, TaskFn};
use crate::errors::Errors;
use crate::fallback;
use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{ItemFn, LitStr, Path};

/// `#[task_tool(args)] item`, from tokens to tokens.
pub(crate) fn task_tool(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut func: ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(err) => return fallback::expand(item, err),
    };
    let output = match generate(args, &mut func) {
        Ok(output) => output,
        Err(err) => fallback::expand_fn(&func, err),
    };
    if let Some(filter) = std::env::var_os("MCP_TASKS_MACROS_DEBUG") {
        let name = func.sig.ident.to_string();
        if filter.is_empty() || filter == "1" || filter == name.as_str() {
            eprintln!("#[task_tool] {name}:\n{output}");
        }
    }
    output
}

/// Parses, validates and expands, reporting every error at once. `func` loses its helper
/// attributes on the way, so the fallback can emit it as well.
pub(crate) fn generate(args: TokenStream, func: &mut ItemFn) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    let args = args::parse(args, &mut errors);
    let attrs = ast::take_param_attrs(func, &mut errors);
    let task = TaskFn::from_syn(func, attrs);
    task.validate(&args, &mut errors);
    errors.finish()?;
    Ok(expand(&args, &task))
}

/// The `T` of a return type spelled `Json<T>`, or `Result<Json<T>, E>` with any path that
/// ends in `Result` (`anyhow::Result<Json<T>>`, `io::Result<Json<T>>`).
fn structured_output(ty: &syn::Type) -> Option<&syn::Type> {
    match ty {
        syn::Type::Group(group) => structured_output(&group.elem),
        syn::Type::Paren(paren) => structured_output(&paren.elem),
        syn::Type::Path(path) if path.qself.is_none() => {
            let last = path.path.segments.last()?;
            let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            let first = args.args.iter().find_map(|arg| match arg {
                syn::GenericArgument::Type(ty) => Some(ty),
                _ => None,
            })?;
            if last.ident == "Json" {
                Some(first)
            } else if last.ident == "Result" {
                structured_output(first)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The function followed by its generated registration.
pub(crate) fn expand(args: &TaskToolArgs, task: &TaskFn<'_>) -> TokenStream {
    let func = task.original;
    let ident = &func.sig.ident;
    let rt = Runtime::new(args.krate.as_ref());
    let p = rt.private(Span::call_site());

    let input = InputCode::new(task, &rt);
    let input_ty = &input.ty;
    let input_items = &input.items;

    let call_args = task.params.iter().map(|param| {
        let ty = param.ty();
        match (&param.kind, ty) {
            (ParamKind::Inject(_), Some(ty)) => {
                let p = rt.private(ty.span());
                quote_spanned! {ty.span()=>
                    <#ty as #p::FromTaskContext>::from_task_context(&__mcp_tasks_cx)
                        .map_err(#p::rejected)?
                }
            }
            (ParamKind::WholeInput, _) => quote!(__mcp_tasks_input),
            (ParamKind::Field, _) => {
                let field = param.ident();
                quote!(__mcp_tasks_input.#field)
            }
            _ => quote!(),
        }
    });

    let ret = match task.return_type() {
        Some(ty) => ty.to_token_stream(),
        None => quote_spanned!(ident.span()=> ()),
    };
    let ret_span = task
        .return_type()
        .map_or_else(|| ident.span(), |ty| ty.span());
    let ret_trait = {
        let p = rt.private(ret_span);
        quote_spanned!(ret_span=> <#ret as #p::IntoToolResult>)
    };
    // The future is handed to the runtime by a function whose `Send` bound is spanned on the
    // tool's name, so a non-`Send` future is reported there rather than on the attribute.
    let boxed = {
        let p = rt.private(ident.span());
        quote_spanned!(ident.span()=> #p::tool_future(__mcp_tasks_future))
    };

    // Both uses of the input type go through `ToolInput`, spanned on the `#[input]` type, so a
    // type that lacks a derive gets one error there, with the trait's hint.
    let input_trait = {
        let span = input.span;
        let p = rt.private(span);
        quote_spanned!(span=> <#input_ty as #p::ToolInput>)
    };
    let parse = quote_spanned!(input.span=> #input_trait::parse(__mcp_tasks_args));
    // `Json<T>` whose `T` is known never to be a JSON object (a `Vec`, a `String`, a number,
    // ...) fails to compile here, on `T`; other types are checked when the server is built.
    let shape_check = task.return_type().and_then(structured_output).map(|t| {
        let p = rt.private(t.span());
        quote_spanned! {t.span()=>
            {
                // Unused when the check fails, which is reported instead.
                #[allow(unused_imports)]
                use #p::AnyOutputShape as _;
                #p::OutputShape::<#t>::new().check();
            }
        }
    });
    // Spanned on the name too, so that rustc's notes call it the tool's future.
    let future = quote_spanned! {ident.span()=>
        async move {
            #shape_check
            let __mcp_tasks_input: #input_ty = #parse?;
            let __mcp_tasks_output = #ident(#(#call_args),*).await;
            #ret_trait::into_tool_result(__mcp_tasks_output)
        }
    };

    let registration = registration(args, task, &rt, &ret_trait, &input_trait);
    let name_check = name_check(args, task, &rt);
    // No description at all: a warning on the function's name (a deprecated constant is the
    // one warning a procedural macro can raise on stable Rust).
    let undescribed =
        matches!((&args.description, &task.doc), (None, Doc::Text(t)) if t.is_empty());
    let description_check = undescribed.then(|| {
        let p = rt.private(ident.span());
        quote_spanned!(ident.span()=> const _: () = #p::TOOL_WITHOUT_DESCRIPTION;)
    });
    // The application state the injected parameters need, checked when the server is built.
    let required_state = task
        .params
        .iter()
        .filter_map(|param| match (&param.kind, param.ty()) {
            (ParamKind::Inject(_), Some(ty)) => {
                let p = rt.private(ty.span());
                Some(quote_spanned! {ty.span()=>
                    __mcp_tasks_state.extend(<#ty as #p::FromTaskContext>::required_state());
                })
            }
            _ => None,
        });

    // A `#[cfg]` on the function applies to its registration too.
    let cfgs = func.attrs.iter().filter(|attr| attr.path().is_ident("cfg"));

    quote! {
        #func

        #(#cfgs)*
        const _: () = {
            #name_check

            #description_check

            #input_items

            fn __mcp_tasks_required_state() -> #p::Vec<#p::StateRequirement> {
                #[allow(unused_mut)]
                let mut __mcp_tasks_state = #p::Vec::new();
                #(#required_state)*
                __mcp_tasks_state
            }

            fn __mcp_tasks_call(
                __mcp_tasks_cx: #p::TaskContext,
                __mcp_tasks_args: #p::JsonObject,
            ) -> #p::ToolFuture {
                let __mcp_tasks_future = #future;
                #boxed
            }

            #registration
        };
    }
}

/// The tool's name: `name = "..."`, or the function's name without its `r#`.
fn tool_name(args: &TaskToolArgs, ident: &syn::Ident) -> LitStr {
    args.name
        .clone()
        .unwrap_or_else(|| LitStr::new(&ident.unraw().to_string(), ident.span()))
}

/// A `const` that checks the tool's name against the runtime's rule while compiling, spanned
/// on the `name = "..."` literal, or on the function's name when the name is derived from
/// it, so that a bad name is an error there.
fn name_check(args: &TaskToolArgs, task: &TaskFn<'_>, rt: &Runtime) -> TokenStream {
    let ident = &task.original.sig.ident;
    let name = tool_name(args, ident);
    let span = name.span();
    let p = rt.private(span);
    let assert = if args.name.is_some() {
        quote_spanned!(span=> assert_tool_name)
    } else {
        quote_spanned!(span=> assert_fn_tool_name)
    };
    quote_spanned! {span=>
        const _: () = #p::#assert(#name);
    }
}

/// The `inventory::submit!` of the tool's `ToolRegistration`.
fn registration(
    args: &TaskToolArgs,
    task: &TaskFn<'_>,
    rt: &Runtime,
    ret_trait: &TokenStream,
    input_trait: &TokenStream,
) -> TokenStream {
    let ident = &task.original.sig.ident;
    let p = rt.private(Span::call_site());
    let name = tool_name(args, ident);
    let title = match &args.title {
        Some(title) => quote!(#p::Option::Some(#title)),
        None => quote!(#p::Option::None),
    };
    let description = match (&args.description, &task.doc) {
        (Some(description), _) => description.to_token_stream(),
        (None, Doc::Text(text)) => LitStr::new(text, Span::call_site()).to_token_stream(),
        (None, Doc::Pieces(pieces)) => {
            let mut parts = Vec::new();
            for piece in pieces {
                if !parts.is_empty() {
                    parts.push(quote!("\n"));
                }
                parts.push(match piece {
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(line),
                        ..
                    }) => {
                        let text = ast::join_doc_lines(&[line.value()]);
                        LitStr::new(&text, line.span()).to_token_stream()
                    }
                    other => other.to_token_stream(),
                });
            }
            quote!(::core::concat!(#(#parts),*))
        }
    };
    let mode = format_ident!("{}", args.mode.unwrap_or(Mode::Optional).variant());
    // The defaults are the runtime's, named rather than copied.
    let poll_interval = match args.poll_interval_ms {
        Some(ms) => quote!(#ms),
        None => quote!(#p::DEFAULT_POLL_INTERVAL_MS),
    };
    let ttl = match args.ttl_ms {
        Some(Some(ms)) => quote!(#p::Option::Some(#ms)),
        Some(None) => quote!(#p::Option::None),
        None => quote!(#p::Option::Some(#p::DEFAULT_TTL_MS)),
    };
    let flag = |value: Option<bool>| match value {
        Some(value) => quote!(#p::Option::Some(#value)),
        None => quote!(#p::Option::None),
    };
    let read_only = flag(args.read_only);
    let destructive = flag(args.destructive);
    let idempotent = flag(args.idempotent);
    let open_world = flag(args.open_world);
    let rerun = args.on_restart.as_ref().is_some_and(|(rerun, _)| *rerun);
    let rerun_unresumable = args
        .on_unresumable
        .as_ref()
        .is_some_and(|(rerun, _)| *rerun);
    let prelude = args.prelude.unwrap_or(false);
    let durable_steps = task.takes_steps();
    let unique = match &args.unique {
        Some(unique) => match &unique.args {
            Some(names) => quote!(#p::Option::Some(#p::Option::Some(&[#(#names),*]))),
            None => quote!(#p::Option::Some(#p::Option::None)),
        },
        None => quote!(#p::Option::None),
    };
    let scopes = args.scopes.iter().flatten();
    let unique_window = match &args.unique_window {
        Some((ms, _)) => quote!(#p::Option::Some(#ms)),
        None => quote!(#p::Option::None),
    };
    // `line!()` spanned on the name reports the line of the function, not of the attribute.
    let line = quote_spanned!(ident.span()=> ::core::line!());
    quote! {
        #p::inventory::submit! {
            #p::ToolRegistration {
                name: #name,
                title: #title,
                description: #description,
                task_support: #p::TaskSupport::#mode,
                poll_interval_ms: #poll_interval,
                ttl_ms: #ttl,
                read_only: #read_only,
                destructive: #destructive,
                idempotent: #idempotent,
                open_world: #open_world,
                rerun_on_restart: #rerun,
                rerun_unresumable: #rerun_unresumable,
                prelude: #prelude,
                durable_steps: #durable_steps,
                unique: #unique,
                unique_window_ms: #unique_window,
                scopes: &[#(#scopes),*],
                input_schema: #input_trait::input_schema,
                output_schema: #ret_trait::output_schema,
                state: __mcp_tasks_required_state,
                call: __mcp_tasks_call,
                module_path: ::core::module_path!(),
                file: ::core::file!(),
                line: #line,
            }
        }
    }
}

/// How the runtime is named: `::mcp_tasks`, or the `crate = ...` path.
struct Runtime {
    krate: Path,
}

impl Runtime {
    fn new(krate: Option<&Path>) -> Self {
        let krate = krate
            .cloned()
            .unwrap_or_else(|| syn::parse_quote!(::mcp_tasks));
        Runtime { krate }
    }

    /// `<crate>::__private`, every token spanned at `span` so that an error involving a
    /// runtime item lands where the tokens around it point.
    fn private(&self, span: Span) -> TokenStream {
        let krate = &self.krate;
        respan(quote!(#krate::__private), span)
    }

    /// `"<crate>::__private::<module>"`, for `#[serde(crate = "...")]` and
    /// `#[schemars(crate = "...")]`, which take the path as a string.
    fn private_str(&self, module: &str) -> LitStr {
        let mut path = String::new();
        if self.krate.leading_colon.is_some() {
            path.push_str("::");
        }
        for segment in &self.krate.segments {
            path.push_str(&segment.ident.to_string());
            path.push_str("::");
        }
        path.push_str("__private::");
        path.push_str(module);
        LitStr::new(&path, Span::call_site())
    }
}

fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut inner =
                    proc_macro2::Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                token = TokenTree::Group(inner);
            } else {
                token.set_span(span);
            }
            token
        })
        .collect()
}

/// The type the arguments deserialize into, and the items that define it.
struct InputCode {
    /// `__McpTasksInput`, or the type of the `#[input]` parameter.
    ty: TokenStream,
    /// The generated struct and its helper functions (nothing for `#[input]`).
    items: TokenStream,
    /// Where errors about the input type belong: the `#[input]` parameter's type.
    span: Span,
}

impl InputCode {
    fn new(task: &TaskFn<'_>, rt: &Runtime) -> Self {
        if let Some(ty) = task
            .params
            .iter()
            .find(|param| matches!(param.kind, ParamKind::WholeInput))
            .and_then(|param| param.ty())
        {
            return InputCode {
                ty: ty.to_token_stream(),
                items: TokenStream::new(),
                span: ty.span(),
            };
        }
        let p = rt.private(Span::call_site());
        let serde_crate = rt.private_str("serde");
        let schemars_crate = rt.private_str("schemars");
        let mut fields = Vec::new();
        let mut helpers = Vec::new();
        for param in &task.params {
            let (ParamKind::Field, Some(ident), Some(ty)) =
                (&param.kind, param.ident(), param.ty())
            else {
                continue;
            };
            let arg = param.attrs.arg.as_ref();
            let mut attrs = Vec::new();
            if let Some(rename) = arg.and_then(|arg| arg.rename.as_ref()) {
                attrs.push(quote!(#[serde(rename = #rename)]));
            }
            if let Some(description) = arg.and_then(|arg| arg.description.as_ref()) {
                attrs.push(quote!(#[schemars(description = #description)]));
            }
            if let Some(default) = arg.and_then(|arg| arg.default.as_ref()) {
                let default_fn = format_ident!("__mcp_tasks_default_{}", ident.unraw());
                let path = LitStr::new(&default_fn.to_string(), Span::call_site());
                attrs.push(quote!(#[serde(default = #path)]));
                helpers.push(quote_spanned! {default.span()=>
                    fn #default_fn() -> #ty {
                        #default
                    }
                });
            } else if ast::is_option(ty) {
                attrs.push(quote!(#[serde(default)]));
            }
            // Deserializing through a function of our own puts the one `Deserialize` bound
            // on the parameter's type; serde's own code would also report it on the attribute.
            let deserialize_fn = format_ident!("__mcp_tasks_deserialize_{}", ident.unraw());
            let path = LitStr::new(&deserialize_fn.to_string(), Span::call_site());
            attrs.push(quote!(#[serde(deserialize_with = #path)]));
            let ps = rt.private(ty.span());
            helpers.push(quote_spanned! {ty.span()=>
                fn #deserialize_fn<'de, __McpTasksD>(
                    __mcp_tasks_deserializer: __McpTasksD,
                ) -> #ps::Result<#ty, __McpTasksD::Error>
                where
                    __McpTasksD: #ps::serde::Deserializer<'de>,
                {
                    <#ty as #ps::serde::Deserialize<'de>>::deserialize(
                        __mcp_tasks_deserializer,
                    )
                }
            });
            // The schema goes through a function of our own too, so that a type without
            // `JsonSchema` is reported on the parameter with a hint to derive it.
            let schema_fn = format_ident!("__mcp_tasks_schema_{}", ident.unraw());
            let path = LitStr::new(&schema_fn.to_string(), Span::call_site());
            attrs.push(quote!(#[schemars(schema_with = #path)]));
            helpers.push(quote_spanned! {ty.span()=>
                fn #schema_fn(
                    __mcp_tasks_generator: &mut #ps::schemars::SchemaGenerator,
                ) -> #ps::schemars::Schema {
                    <#ty as #ps::InputField>::field_schema(__mcp_tasks_generator)
                }
            });
            fields.push(quote!(#(#attrs)* #ident: #ty));
        }
        let items = quote! {
            #[derive(#p::serde::Deserialize, #p::schemars::JsonSchema)]
            #[serde(crate = #serde_crate, deny_unknown_fields)]
            #[schemars(crate = #schemars_crate)]
            struct __McpTasksInput {
                #(#fields,)*
            }

            #(#helpers)*
        };
        InputCode {
            ty: quote!(__McpTasksInput),
            items,
            span: Span::call_site(),
        }
    }
}

#[cfg(test)]
mod tests;
