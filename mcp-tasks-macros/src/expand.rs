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
mod tests {
    use super::*;
    use syn::{ExprStruct, Item, ItemConst, ItemMacro, ItemStruct};

    /// Expands and splits the output into the re-emitted function and the `const _` block.
    fn expand_ok(args: TokenStream, item: TokenStream) -> (ItemFn, Vec<Item>) {
        let mut func = syn::parse2(item).unwrap();
        let output = generate(args, &mut func).unwrap();
        let file: syn::File = syn::parse2(output).unwrap();
        let [Item::Fn(emitted), Item::Const(block)] = &file.items[..] else {
            panic!("expected a fn and a const, got {}", file.items.len());
        };
        assert_eq!(emitted, &func);
        (emitted.clone(), const_items(block))
    }

    fn const_items(block: &ItemConst) -> Vec<Item> {
        assert_eq!(block.ident, "_");
        let syn::Expr::Block(expr) = &*block.expr else {
            panic!("the const is not a block");
        };
        expr.block
            .stmts
            .iter()
            .map(|stmt| match stmt {
                syn::Stmt::Item(item) => item.clone(),
                syn::Stmt::Macro(mac) => Item::Macro(ItemMacro {
                    attrs: mac.attrs.clone(),
                    ident: None,
                    mac: mac.mac.clone(),
                    semi_token: mac.semi_token,
                }),
                other => panic!("unexpected statement {}", other.to_token_stream()),
            })
            .collect()
    }

    /// The `ToolRegistration { .. }` literal, field by field.
    fn registration(items: &[Item]) -> Vec<(String, String)> {
        let mac = items
            .iter()
            .find_map(|item| match item {
                Item::Macro(mac) => Some(&mac.mac),
                _ => None,
            })
            .expect("inventory::submit!");
        assert!(
            mac.path
                .to_token_stream()
                .to_string()
                .ends_with("inventory :: submit")
        );
        let literal: ExprStruct = syn::parse2(mac.tokens.clone()).unwrap();
        literal
            .fields
            .iter()
            .map(|field| {
                (
                    field.member.to_token_stream().to_string(),
                    field.expr.to_token_stream().to_string(),
                )
            })
            .collect()
    }

    fn field<'a>(registration: &'a [(String, String)], name: &str) -> &'a str {
        &registration.iter().find(|(n, _)| n == name).unwrap().1
    }

    fn input_struct(items: &[Item]) -> Option<&ItemStruct> {
        items.iter().find_map(|item| match item {
            Item::Struct(s) => Some(s),
            _ => None,
        })
    }

    #[test]
    fn the_function_comes_back_untouched_but_for_helper_attributes() {
        let (emitted, _) = expand_ok(
            quote!(),
            quote! {
                /// Docs stay.
                pub async fn tool(#[arg(description = "d")] n: u32, #[inject] db: Db) -> String {
                    n.to_string()
                }
            },
        );
        let expected: ItemFn = syn::parse_quote! {
            /// Docs stay.
            pub async fn tool(n: u32, db: Db) -> String {
                n.to_string()
            }
        };
        assert_eq!(emitted, expected);
    }

    #[test]
    fn a_cfg_on_the_function_applies_to_the_registration() {
        let mut func = syn::parse2(quote! {
            #[cfg(feature = "reports")]
            #[allow(unused)]
            async fn tool() {}
        })
        .unwrap();
        let output = generate(quote!(), &mut func).unwrap();
        let file: syn::File = syn::parse2(output).unwrap();
        let Item::Const(block) = &file.items[1] else {
            panic!("expected the const block second");
        };
        let attrs: Vec<String> = block
            .attrs
            .iter()
            .map(|attr| attr.to_token_stream().to_string())
            .collect();
        assert_eq!(attrs, ["# [cfg (feature = \"reports\")]"]);
    }

    #[test]
    fn the_registration_carries_every_argument() {
        let (_, items) = expand_ok(
            quote!(
                mode = "required",
                poll_interval = "2s",
                ttl = "none",
                name = "render.v2",
                title = "Render",
                read_only,
                destructive = false,
                idempotent,
                on_restart = "rerun",
                on_unresumable = "rerun",
            ),
            quote! {
                /// Render a report.
                ///
                /// In order.
                async fn render(pages: u32) -> String { String::new() }
            },
        );
        let reg = registration(&items);
        let names: Vec<&str> = reg.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "name",
                "title",
                "description",
                "task_support",
                "poll_interval_ms",
                "ttl_ms",
                "read_only",
                "destructive",
                "idempotent",
                "open_world",
                "rerun_on_restart",
                "rerun_unresumable",
                "prelude",
                "input_schema",
                "output_schema",
                "state",
                "call",
                "module_path",
                "file",
                "line",
            ]
        );
        assert_eq!(field(&reg, "name"), "\"render.v2\"");
        assert_eq!(
            field(&reg, "title"),
            ":: mcp_tasks :: __private :: Option :: Some (\"Render\")"
        );
        assert_eq!(
            field(&reg, "description"),
            "\"Render a report.\\n\\nIn order.\""
        );
        assert_eq!(
            field(&reg, "task_support"),
            ":: mcp_tasks :: __private :: TaskSupport :: Required"
        );
        assert_eq!(field(&reg, "poll_interval_ms"), "2000u64");
        assert_eq!(
            field(&reg, "ttl_ms"),
            ":: mcp_tasks :: __private :: Option :: None"
        );
        assert_eq!(
            field(&reg, "read_only"),
            ":: mcp_tasks :: __private :: Option :: Some (true)"
        );
        assert_eq!(
            field(&reg, "destructive"),
            ":: mcp_tasks :: __private :: Option :: Some (false)"
        );
        assert_eq!(
            field(&reg, "open_world"),
            ":: mcp_tasks :: __private :: Option :: None"
        );
        assert_eq!(field(&reg, "rerun_on_restart"), "true");
        assert_eq!(field(&reg, "rerun_unresumable"), "true");
        assert_eq!(
            field(&reg, "input_schema"),
            "< __McpTasksInput as :: mcp_tasks :: __private :: ToolInput > :: input_schema"
        );
        assert_eq!(
            field(&reg, "output_schema"),
            "< String as :: mcp_tasks :: __private :: IntoToolResult > :: output_schema"
        );
        assert_eq!(field(&reg, "call"), "__mcp_tasks_call");
        assert_eq!(field(&reg, "line"), ":: core :: line ! ()");
    }

    /// The `const _: () = <check>;` inside the block, as a string.
    fn name_check(items: &[Item]) -> String {
        let checks: Vec<String> = items
            .iter()
            .filter_map(|item| match item {
                Item::Const(check) if matches!(*check.ty, syn::Type::Tuple(_)) => {
                    Some(check.expr.to_token_stream().to_string())
                }
                _ => None,
            })
            .filter(|check| check.contains("tool_name"))
            .collect();
        let [check] = &checks[..] else {
            panic!("expected one name check, got {checks:?}");
        };
        check.clone()
    }

    /// The generated items that name the runtime's warning for a tool without a description.
    fn description_warnings(items: &[Item]) -> usize {
        items
            .iter()
            .filter(|item| {
                matches!(item, Item::Const(c)
                    if c.expr.to_token_stream().to_string().contains("TOOL_WITHOUT_DESCRIPTION"))
            })
            .count()
    }

    #[test]
    fn a_tool_without_a_description_warns() {
        let (_, items) = expand_ok(
            quote!(),
            quote!(
                async fn bare() {}
            ),
        );
        assert_eq!(description_warnings(&items), 1);
        for (args, func) in [
            (
                quote!(),
                quote!(
                    /// Described.
                    async fn documented() {}
                ),
            ),
            (
                quote!(description = "Described."),
                quote!(
                    async fn named() {}
                ),
            ),
            (
                quote!(description = ""),
                quote!(
                    async fn on_purpose() {}
                ),
            ),
        ] {
            let (_, items) = expand_ok(args, func);
            assert_eq!(description_warnings(&items), 0);
        }
    }

    #[test]
    fn the_name_is_checked_by_the_runtime_while_compiling() {
        let (_, items) = expand_ok(
            quote!(name = "render report"),
            quote!(
                async fn render() {}
            ),
        );
        assert_eq!(
            name_check(&items),
            ":: mcp_tasks :: __private :: assert_tool_name (\"render report\")"
        );
        let (_, items) = expand_ok(
            quote!(crate = crate::rt),
            quote!(
                async fn r#type() {}
            ),
        );
        assert_eq!(
            name_check(&items),
            "crate :: rt :: __private :: assert_fn_tool_name (\"type\")"
        );
    }

    #[test]
    fn defaults_fill_in_what_is_not_given() {
        let (_, items) = expand_ok(
            quote!(),
            quote!(
                async fn r#type() {}
            ),
        );
        let reg = registration(&items);
        assert_eq!(field(&reg, "name"), "\"type\"");
        assert_eq!(field(&reg, "description"), "\"\"");
        assert_eq!(
            field(&reg, "task_support"),
            ":: mcp_tasks :: __private :: TaskSupport :: Optional"
        );
        assert_eq!(
            field(&reg, "poll_interval_ms"),
            ":: mcp_tasks :: __private :: DEFAULT_POLL_INTERVAL_MS"
        );
        assert_eq!(
            field(&reg, "ttl_ms"),
            ":: mcp_tasks :: __private :: Option :: Some (:: mcp_tasks :: __private :: DEFAULT_TTL_MS)"
        );
        assert_eq!(field(&reg, "rerun_on_restart"), "false");
        assert_eq!(field(&reg, "rerun_unresumable"), "false");
        assert_eq!(
            field(&reg, "output_schema"),
            "< () as :: mcp_tasks :: __private :: IntoToolResult > :: output_schema"
        );
    }

    #[test]
    fn docs_that_are_not_literals_are_concatenated_at_compile_time() {
        let (_, items) = expand_ok(
            quote!(),
            quote! {
                #[doc = include_str!("tool.md")]
                /// More.
                async fn tool() {}
            },
        );
        assert_eq!(
            field(&registration(&items), "description"),
            ":: core :: concat ! (include_str ! (\"tool.md\") , \"\\n\" , \"More.\")"
        );
    }

    #[test]
    fn input_fields_become_a_struct_with_serde_and_schemars_attributes() {
        let (_, items) = expand_ok(
            quote!(),
            quote! {
                async fn tool(
                    #[arg(description = "How many.", default = 2 + 1, rename = "count")] n: u32,
                    note: Option<String>,
                    progress: Progress,
                ) {}
            },
        );
        let input = input_struct(&items).unwrap();
        assert_eq!(input.ident, "__McpTasksInput");
        let attrs: Vec<String> = input
            .attrs
            .iter()
            .map(|attr| attr.to_token_stream().to_string())
            .collect();
        assert_eq!(
            attrs,
            [
                "# [derive (:: mcp_tasks :: __private :: serde :: Deserialize , :: mcp_tasks :: __private :: schemars :: JsonSchema)]",
                "# [serde (crate = \"::mcp_tasks::__private::serde\" , deny_unknown_fields)]",
                "# [schemars (crate = \"::mcp_tasks::__private::schemars\")]",
            ]
        );
        let fields: Vec<String> = input
            .fields
            .iter()
            .map(|field| field.to_token_stream().to_string())
            .collect();
        assert_eq!(
            fields,
            [
                "# [serde (rename = \"count\")] # [schemars (description = \"How many.\")] # [serde (default = \"__mcp_tasks_default_n\")] # [serde (deserialize_with = \"__mcp_tasks_deserialize_n\")] # [schemars (schema_with = \"__mcp_tasks_schema_n\")] n : u32",
                "# [serde (default)] # [serde (deserialize_with = \"__mcp_tasks_deserialize_note\")] # [schemars (schema_with = \"__mcp_tasks_schema_note\")] note : Option < String >",
            ]
        );
        let helpers: Vec<String> = items
            .iter()
            .filter_map(|item| match item {
                Item::Fn(f) => Some(f.sig.ident.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(
            helpers,
            [
                "__mcp_tasks_default_n",
                "__mcp_tasks_deserialize_n",
                "__mcp_tasks_schema_n",
                "__mcp_tasks_deserialize_note",
                "__mcp_tasks_schema_note",
                "__mcp_tasks_required_state",
                "__mcp_tasks_call",
            ]
        );
    }

    #[test]
    fn a_whole_input_is_parsed_directly() {
        let (_, items) = expand_ok(
            quote!(),
            quote!(
                async fn tool(cx: TaskContext, #[input] Args { a }: Args) {}
            ),
        );
        assert!(input_struct(&items).is_none());
        assert_eq!(
            field(&registration(&items), "input_schema"),
            "< Args as :: mcp_tasks :: __private :: ToolInput > :: input_schema"
        );
        let call = items
            .iter()
            .find_map(|item| match item {
                Item::Fn(f) if f.sig.ident == "__mcp_tasks_call" => Some(f),
                _ => None,
            })
            .unwrap()
            .to_token_stream()
            .to_string();
        assert!(call.contains("< Args as :: mcp_tasks :: __private :: ToolInput > :: parse"));
        assert!(call.contains(
            "tool (< TaskContext as :: mcp_tasks :: __private :: FromTaskContext > :: from_task_context (& __mcp_tasks_cx) . map_err (:: mcp_tasks :: __private :: rejected) ? , __mcp_tasks_input)"
        ));
    }

    #[test]
    fn a_crate_path_reaches_every_runtime_name() {
        let (_, items) = expand_ok(
            quote!(crate = crate::rt),
            quote!(
                async fn tool(n: u32) {}
            ),
        );
        let block = items
            .iter()
            .map(|item| item.to_token_stream().to_string())
            .collect::<String>();
        assert!(!block.contains(":: mcp_tasks"), "{block}");
        assert!(block.contains("\"crate::rt::__private::serde\""));
        assert!(block.contains("\"crate::rt::__private::schemars\""));
        assert!(block.contains("crate :: rt :: __private :: inventory :: submit !"));
    }

    #[test]
    fn generated_items_carry_the_prefix() {
        let (_, items) = expand_ok(
            quote!(),
            quote!(
                async fn tool(#[arg(default = 1)] n: u32, m: Option<u8>) {}
            ),
        );
        for item in &items {
            let name = match item {
                Item::Fn(f) => f.sig.ident.to_string(),
                Item::Struct(s) => s.ident.to_string(),
                // `const _`, the name check: it names nothing.
                Item::Macro(_) => continue,
                Item::Const(check) if check.ident == "_" => continue,
                other => panic!("unexpected item {}", other.to_token_stream()),
            };
            assert!(
                name.starts_with("__mcp_tasks_") || name.starts_with("__McpTasks"),
                "{name}"
            );
        }
    }

    #[test]
    fn errors_fall_back_to_the_function_and_the_errors() {
        let output = task_tool(
            quote!(mode = "x"),
            quote!(
                fn tool(#[arg(description = "d")] n: u32, _: ...) {}
            ),
        );
        let file: syn::File = syn::parse2(output).unwrap();
        let [Item::Fn(func), errors @ ..] = &file.items[..] else {
            panic!("expected the fn first");
        };
        let expected: ItemFn = syn::parse_quote!(
            fn tool(n: u32) {}
        );
        assert_eq!(func, &expected);
        let macros: Vec<String> = errors
            .iter()
            .map(|item| match item {
                Item::Macro(mac) => mac.mac.path.segments.last().unwrap().ident.to_string(),
                other => panic!("unexpected item {}", other.to_token_stream()),
            })
            .collect();
        // The bad mode, the missing `async` and the variadic.
        assert_eq!(macros, ["compile_error"; 3]);
    }

    #[test]
    fn an_item_that_is_not_a_function_is_returned_with_the_parse_error() {
        let output = task_tool(
            quote!(),
            quote!(
                struct NotAFn;
            ),
        );
        let text = output.to_string();
        assert!(text.starts_with("struct NotAFn ;"), "{text}");
        assert!(text.contains("compile_error"), "{text}");
    }
}
