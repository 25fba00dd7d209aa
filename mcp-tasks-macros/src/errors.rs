//! The error accumulator every stage shares: each check adds its error, and the expansion
//! reports all of them at once.

use quote::ToTokens;
use std::fmt::Display;

/// Collects errors so that one compile run reports all of them (serde's `Ctxt`).
#[derive(Default)]
pub(crate) struct Errors {
    combined: Option<syn::Error>,
}

impl Errors {
    /// Adds an error.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.combined {
            Some(combined) => combined.combine(error),
            None => self.combined = Some(error),
        }
    }

    /// Adds an error spanning `tokens`.
    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// All the errors, if there were any.
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.combined.map_or(Ok(()), Err)
    }
}
