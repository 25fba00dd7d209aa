//! What `#[task_tool]` expands to when something is wrong: the function as written, followed
//! by the errors. Emitting the function keeps its callers compiling, so the user sees only
//! the real errors (thiserror's `fallback.rs`, tokio's `token_stream_with_error`).

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::ItemFn;

/// The item's tokens as they came in, then the error.
pub(crate) fn expand(item: TokenStream, error: syn::Error) -> TokenStream {
    let mut tokens = item;
    tokens.extend(error.to_compile_error());
    tokens
}

/// The function with its helper attributes removed, then the errors.
///
/// A variadic `...` is dropped as well: rustc refuses it outside `extern` blocks, and that
/// second error would only repeat ours.
pub(crate) fn expand_fn(func: &ItemFn, error: syn::Error) -> TokenStream {
    let mut func = func.clone();
    if func.sig.variadic.take().is_some() && func.sig.inputs.trailing_punct() {
        func.sig.inputs.pop_punct();
    }
    expand(func.into_token_stream(), error)
}
