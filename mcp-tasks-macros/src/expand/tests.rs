//! The expansion, item by item.

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
            "durable_steps",
            "unique",
            "unique_window_ms",
            "scopes",
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
    assert_eq!(field(&reg, "durable_steps"), "false");
    assert_eq!(
        field(&reg, "unique"),
        ":: mcp_tasks :: __private :: Option :: None"
    );
    assert_eq!(
        field(&reg, "unique_window_ms"),
        ":: mcp_tasks :: __private :: Option :: None"
    );
    assert_eq!(field(&reg, "scopes"), "& []");
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

#[test]
fn a_steps_parameter_makes_durable_steps_and_unique_is_carried() {
    let (_, items) = expand_ok(
        quote!(
            mode = "required",
            on_restart = "rerun",
            unique = ["order", "tenant"],
            unique_window = "1h",
        ),
        quote! {
            async fn order(order: String, tenant: String, steps: mcp_tasks::Steps) {}
        },
    );
    let reg = registration(&items);
    assert_eq!(field(&reg, "durable_steps"), "true");
    assert_eq!(
        field(&reg, "unique"),
        ":: mcp_tasks :: __private :: Option :: Some (:: mcp_tasks :: __private :: Option :: Some (& [\"order\" , \"tenant\"]))"
    );
    assert_eq!(
        field(&reg, "unique_window_ms"),
        ":: mcp_tasks :: __private :: Option :: Some (3600000u64)"
    );
    let (_, items) = expand_ok(
        quote!(unique),
        quote! {
            async fn reindex(index: String) {}
        },
    );
    let reg = registration(&items);
    assert_eq!(
        field(&reg, "unique"),
        ":: mcp_tasks :: __private :: Option :: Some (:: mcp_tasks :: __private :: Option :: None)"
    );
    assert_eq!(field(&reg, "durable_steps"), "false");
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

#[test]
fn scopes_are_carried_and_a_principal_is_injected() {
    let (_, items) = expand_ok(
        quote!(scopes = ["reports:write", "reports:read"]),
        quote! {
            async fn publish(title: String, who: mcp_tasks::Principal, maybe: Option<Principal>) {}
        },
    );
    let reg = registration(&items);
    assert_eq!(
        field(&reg, "scopes"),
        "& [\"reports:write\" , \"reports:read\"]"
    );
    let text: String = items
        .iter()
        .map(|item| quote::ToTokens::to_token_stream(item).to_string())
        .collect();
    assert!(
        text.contains("< mcp_tasks :: Principal as :: mcp_tasks :: __private :: FromTaskContext >"),
        "{text}"
    );
    assert!(
        text.contains("< Option < Principal > as :: mcp_tasks :: __private :: FromTaskContext >"),
        "{text}"
    );
}
