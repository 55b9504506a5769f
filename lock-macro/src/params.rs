//! The fn's parameters as the key template and the `manager` expression see them: which names
//! a placeholder may start with, what a placeholder compiles to, and which parameters the body
//! owns.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::visit_mut::VisitMut;
use syn::{FnArg, Ident, Index, LitStr, Member, Pat, Receiver, Signature, Type};

use crate::attr::KeyArg;
use crate::item::AsyncTraitBody;
use crate::suggest;
use crate::template::{Placeholder, Segment};
use crate::types::{is_type_param, pretty, strip_groups};

/// Bytes reserved per placeholder in the rendered key: a `u64` in decimal takes up to 20.
const PLACEHOLDER_CAPACITY: usize = 20;

/// The key as `expand` renders it: a format string with one `{}` per placeholder.
pub(crate) struct KeyPlan {
    /// The key literal, spanned at the user's `key = "..."`.
    pub(crate) format: LitStr,
    /// The whole key when it has no placeholders.
    pub(crate) literal: Option<LitStr>,
    pub(crate) parts: Vec<KeyPart>,
    pub(crate) capacity: usize,
}

/// One placeholder: `root.field.method()...`, checked at the parameter's span.
pub(crate) struct KeyPart {
    /// The parameter's own ident (or the receiver's `self`), so that it resolves to it.
    pub(crate) root: TokenStream,
    /// `.field`, `.0` and `.method()`, spanned at the key.
    pub(crate) accessors: TokenStream,
    pub(crate) param_span: Span,
    /// The value is a parameter whose type is one of the fn's type parameters (`id: T`,
    /// `id: &T`, `id: impl Trait`): checked as `Display` itself, so that rustc's help proposes
    /// `T: std::fmt::Display` rather than the runtime's support trait.
    pub(crate) type_param: bool,
}

/// The parameters a placeholder may name, and those it may not.
pub(crate) struct Params<'a> {
    receiver: Option<&'a Receiver>,
    /// Parameters bound to a plain name (`id: u64`, `mut id: u64`), with their types.
    named: Vec<(&'a Ident, &'a Type)>,
    /// Parameters that a `#[cfg]` or `#[cfg_attr]` may remove.
    conditional: Vec<(&'a Ident, &'a syn::Attribute)>,
    /// Names bound inside destructuring patterns (`(a, b): (u64, u64)`).
    in_patterns: Vec<PatternBinding<'a>>,
}

impl<'a> Params<'a> {
    pub(crate) fn of(sig: &'a Signature) -> Self {
        let mut params = Params {
            receiver: None,
            named: Vec::new(),
            conditional: Vec::new(),
            in_patterns: Vec::new(),
        };
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(receiver) => params.receiver = Some(receiver),
                FnArg::Typed(typed) => match &*typed.pat {
                    Pat::Ident(ident) => {
                        params.named.push((&ident.ident, &typed.ty));
                        let cfg = typed.attrs.iter().find(|attr| {
                            attr.path().is_ident("cfg") || attr.path().is_ident("cfg_attr")
                        });
                        if let Some(cfg) = cfg {
                            params.conditional.push((&ident.ident, cfg));
                        }
                        if let Some((_, sub)) = &ident.subpat {
                            bindings(sub, &typed.ty, Some(Vec::new()), &mut params.in_patterns);
                        }
                    }
                    pat => bindings(pat, &typed.ty, Some(Vec::new()), &mut params.in_patterns),
                },
            }
        }
        params
    }

    /// Under `#[async_trait]`, pattern parameters live in the block: find them there so that a
    /// placeholder naming one gets the same message as on a plain `async fn`.
    pub(crate) fn add_moved_patterns(&mut self, info: &'a AsyncTraitBody) {
        for (pat, carrier) in info.moved_patterns() {
            let ty = self
                .named
                .iter()
                .find(|(ident, _)| *ident == carrier)
                .map(|(_, ty)| *ty);
            if let Some(ty) = ty {
                bindings(pat, ty, Some(Vec::new()), &mut self.in_patterns);
            }
        }
    }

    fn named(&self, name: &str) -> Option<&'a Ident> {
        self.named_typed(name).map(|(ident, _)| ident)
    }

    fn named_typed(&self, name: &str) -> Option<(&'a Ident, &'a Type)> {
        self.named
            .iter()
            .copied()
            .find(|(ident, _)| ident.unraw() == name)
    }

    /// Names to suggest: the user's own parameters, not the `__argN` that `#[async_trait]` makes
    /// for patterns.
    fn suggestable(&self) -> Vec<String> {
        let receiver = self.receiver.map(|_| "self".to_owned());
        receiver
            .into_iter()
            .chain(
                self.named
                    .iter()
                    .map(|(ident, _)| ident.unraw().to_string())
                    .filter(|name| !is_positional_arg(name)),
            )
            .collect()
    }
}

pub(crate) fn is_positional_arg(name: &str) -> bool {
    name.strip_prefix("__arg")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A name bound inside a parameter's pattern, with where it sits in the parameter's value.
struct PatternBinding<'a> {
    ident: &'a Ident,
    /// The whole parameter's type.
    ty: &'a Type,
    /// Field names and tuple indices leading to the binding (`(a, b)`: `b` is at `1`); `None`
    /// inside a slice pattern, which field access cannot reach.
    path: Option<Vec<String>>,
}

fn bindings<'a>(
    pat: &'a Pat,
    ty: &'a Type,
    path: Option<Vec<String>>,
    out: &mut Vec<PatternBinding<'a>>,
) {
    let at = |step: String| {
        path.clone().map(|mut path| {
            path.push(step);
            path
        })
    };
    match pat {
        Pat::Ident(ident) => {
            out.push(PatternBinding {
                ident: &ident.ident,
                ty,
                path: path.clone(),
            });
            if let Some((_, sub)) = &ident.subpat {
                bindings(sub, ty, path, out);
            }
        }
        Pat::Or(or) => {
            for case in &or.cases {
                bindings(case, ty, path.clone(), out);
            }
        }
        Pat::Paren(paren) => bindings(&paren.pat, ty, path, out),
        Pat::Reference(reference) => bindings(&reference.pat, ty, path, out),
        Pat::Type(typed) => bindings(&typed.pat, ty, path, out),
        Pat::Slice(slice) => {
            for elem in &slice.elems {
                bindings(elem, ty, None, out);
            }
        }
        Pat::Struct(strukt) => {
            for field in &strukt.fields {
                let step = match &field.member {
                    Member::Named(name) => name.to_string(),
                    Member::Unnamed(index) => index.index.to_string(),
                };
                bindings(&field.pat, ty, at(step), out);
            }
        }
        Pat::Tuple(tuple) => {
            for (i, elem) in tuple.elems.iter().enumerate() {
                bindings(elem, ty, at(i.to_string()), out);
            }
        }
        Pat::TupleStruct(tuple) => {
            for (i, elem) in tuple.elems.iter().enumerate() {
                bindings(elem, ty, at(i.to_string()), out);
            }
        }
        _ => {}
    }
}

/// How to rewrite a placeholder that names a pattern binding: `pair: (u32, u32)` and `<pair.0>`.
fn pattern_fix(binding: &PatternBinding<'_>, placeholder: &Placeholder) -> String {
    let name = match strip_groups(binding.ty) {
        Type::Path(path) => path.path.segments.last().map_or_else(
            || "value".to_owned(),
            |segment| suggest::snake_case(&segment.ident.to_string()),
        ),
        Type::Tuple(tuple) if tuple.elems.len() == 2 => "pair".to_owned(),
        Type::Reference(reference) => match strip_groups(&reference.elem) {
            Type::Path(path) => path.path.segments.last().map_or_else(
                || "value".to_owned(),
                |segment| suggest::snake_case(&segment.ident.to_string()),
            ),
            _ => "value".to_owned(),
        },
        _ => "value".to_owned(),
    };
    let ty = pretty(binding.ty.to_token_stream());
    match &binding.path {
        Some(path) => {
            let fixed = Placeholder {
                root: name.clone(),
                fields: path.iter().chain(&placeholder.fields).cloned().collect(),
            };
            format!("name the parameter, e.g. `{name}: {ty}`, and write `{fixed}`")
        }
        None => format!("name the parameter, e.g. `{name}: {ty}`, and use its fields"),
    }
}

/// Resolves every placeholder against the signature, reporting every bad one. Errors point at
/// the key literal and name the placeholder (sub-spans inside a literal are nightly-only).
pub(crate) fn resolve_key(
    key: &KeyArg,
    params: &Params<'_>,
    sig: &Signature,
) -> Result<KeyPlan, Vec<syn::Error>> {
    let span = key.lit.span();
    let mut errors = Vec::new();
    let mut template = key.template.clone();
    for segment in &mut template.segments {
        if let Segment::Text(text) = segment {
            match literal_text(text, params) {
                Ok(unescaped) => *text = unescaped,
                Err(messages) => {
                    errors.extend(messages.into_iter().map(|msg| syn::Error::new(span, msg)));
                }
            }
        }
    }
    let mut parts = Vec::new();
    for placeholder in template.placeholders() {
        match resolve_placeholder(placeholder, params, sig, span) {
            Ok(part) => parts.push(part),
            Err(err) => errors.push(err),
        }
    }
    if !errors.is_empty() {
        if key.in_keys {
            errors = errors
                .into_iter()
                .map(|err| syn::Error::new(span, crate::attr::about_keys(err.to_string())))
                .collect();
        }
        return Err(errors);
    }
    let literal = template
        .as_literal()
        .map(|literal| LitStr::new(&literal, span));
    Ok(KeyPlan {
        format: LitStr::new(&template.format_string(), span),
        literal,
        capacity: template.literal_len() + PLACEHOLDER_CAPACITY * parts.len(),
        parts,
    })
}

/// Literal text of a key, checked for placeholders written in another language's syntax:
/// `{user_id}`, `${user_id}`, `#{user_id}` and `#user_id` render as that text, so every call
/// would share one lock. They are errors when the name is a parameter (or `self`); a doubled
/// `{{user_id}}` or `##user_id` is the escape for deliberate literal text, and is returned
/// undoubled. Braces around anything else (`{tenant}`, `{<user_id>}`, a Redis hash tag) are
/// plain text.
fn literal_text(text: &str, params: &Params<'_>) -> Result<String, Vec<String>> {
    let is_param = |path: &str| {
        let root = path.split('.').next().unwrap_or(path);
        root == "self" && params.receiver.is_some() || params.named(root).is_some()
    };
    let mut out = String::with_capacity(text.len());
    let mut errors = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '{' {
            let doubled = rest.starts_with("{{");
            let inner_start = if doubled { 2 } else { 1 };
            let path_len = path_prefix(&rest[inner_start..]);
            let path = &rest[inner_start..inner_start + path_len];
            let after = &rest[inner_start + path_len..];
            let closes = if doubled { "}}" } else { "}" };
            if path_len > 0 && after.starts_with(closes) && is_param(path) {
                if doubled {
                    out.push('{');
                    out.push_str(path);
                    out.push('}');
                } else {
                    let prefix = out
                        .chars()
                        .last()
                        .filter(|c| matches!(c, '$' | '#'))
                        .map(String::from)
                        .unwrap_or_default();
                    errors.push(trap_message(&format!("{prefix}{{{path}}}"), path, true));
                    out.push('{');
                    out.push_str(path);
                    out.push('}');
                }
                rest = &after[closes.len()..];
                continue;
            }
        }
        if c == '#' {
            let doubled = rest.starts_with("##");
            let inner_start = if doubled { 2 } else { 1 };
            let path_len = path_prefix(&rest[inner_start..]);
            let path = &rest[inner_start..inner_start + path_len];
            if path_len > 0 && is_param(path) {
                if !doubled {
                    errors.push(trap_message(&format!("#{path}"), path, false));
                }
                out.push('#');
                out.push_str(path);
                rest = &rest[inner_start + path_len..];
                continue;
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// The length of the `name.field.0` path at the start of `text` (0 if none).
fn path_prefix(text: &str) -> usize {
    let mut len = 0;
    for (i, c) in text.char_indices() {
        let starts_word = i == 0 || text[..i].ends_with('.');
        let ok = if starts_word {
            c == '_' || c.is_alphanumeric()
        } else {
            c == '_' || c == '.' || c.is_alphanumeric()
        };
        if !ok {
            break;
        }
        len = i + c.len_utf8();
    }
    text[..len].trim_end_matches('.').len()
}

fn trap_message(written: &str, path: &str, braces: bool) -> String {
    let (escape, text) = if braces {
        (format!("{{{{{path}}}}}"), format!("{{{path}}}"))
    } else {
        (format!("##{path}"), format!("#{path}"))
    };
    let hash_tag = if braces {
        format!(" (keep the braces around it for a Redis hash tag: `{{<{path}>}}`)")
    } else {
        String::new()
    };
    format!(
        "`{written}` in `key` is literal text, not a placeholder, so every call would share \
         one lock: write `<{path}>` to put the value of `{path}` in the key{hash_tag}, or \
         `{escape}` if you mean the text `{text}` itself"
    )
}

fn resolve_placeholder(
    placeholder: &Placeholder,
    params: &Params<'_>,
    sig: &Signature,
    span: Span,
) -> syn::Result<KeyPart> {
    let error = |message: String| syn::Error::new(span, message);
    let root_name = placeholder
        .root
        .strip_prefix("r#")
        .unwrap_or(&placeholder.root);
    let mut type_param = false;
    let (root, param_span) = if root_name == "self" {
        let receiver = params.receiver.ok_or_else(|| {
            error(format!(
                "placeholder `{placeholder}` in `key` uses `self`, but `{}` has no `self` \
                 parameter: name one of its parameters instead, or make it a method",
                sig.ident
            ))
        })?;
        let token = receiver.self_token;
        // `&self` and `&mut self`: read through the reference, so that a missing `Display` names
        // the type (`Svc`), not the reference (`&Svc`).
        let root = if matches!(strip_groups(&receiver.ty), Type::Reference(_)) {
            quote::quote_spanned!(token.span=> (*#token))
        } else {
            token.to_token_stream()
        };
        (root, token.span)
    } else if root_name == "_" {
        return Err(error(format!(
            "placeholder `{placeholder}` in `key` names a `_` parameter, which cannot be read: \
             give the parameter a name (e.g. `id: u64`) and write `<id>`"
        )));
    } else if let Some((ident, cfg)) = params
        .conditional
        .iter()
        .find(|(ident, _)| ident.unraw() == root_name)
    {
        return Err(error(format!(
            "placeholder `{placeholder}` in `key` names `{root_name}`, a parameter that \
             `#[{}]` removes in some builds, where the key could not be rendered: name a \
             parameter that is always there, or remove the `#[cfg]` from `{ident}`",
            pretty(cfg.meta.to_token_stream())
        )));
    } else if let Some((ident, ty)) = params.named_typed(root_name) {
        let generic = placeholder
            .fields
            .is_empty()
            .then(|| generic_value(ty, sig))
            .flatten();
        type_param = generic.is_some();
        let root = match generic {
            // `id: &T`: read through the reference, so that the check is `T: Display`. A
            // `T: ?Sized` (`str`, `dyn Display`) cannot be read that way, since the check
            // borrows the value as a `&dyn Display`: the reference itself is checked.
            Some(GenericValue::Reference) => quote::quote_spanned!(ident.span()=> (*#ident)),
            _ => ident.to_token_stream(),
        };
        (root, ident.span())
    } else if let Some(binding) = params
        .in_patterns
        .iter()
        .find(|binding| binding.ident.unraw() == root_name)
    {
        return Err(error(format!(
            "placeholder `{placeholder}` in `key` names `{root_name}`, which is bound inside a \
             parameter's pattern: a placeholder must start with a whole parameter; {}",
            pattern_fix(binding, placeholder)
        )));
    } else {
        return Err(error(unknown_placeholder(
            placeholder,
            root_name,
            params,
            sig,
        )));
    };
    let mut accessors = TokenStream::new();
    for field in &placeholder.fields {
        accessors.extend(accessor(field, placeholder, span)?);
    }
    Ok(KeyPart {
        root,
        accessors,
        param_span,
        type_param,
    })
}

/// How a parameter's type is one of the fn's type parameters, if it is.
enum GenericValue {
    /// `T` or `impl Trait`, or a reference to one that may be unsized (`&T` with `T: ?Sized`).
    Owned,
    /// `&T`, `&mut T`, `&impl Trait`, where the type parameter is `Sized`.
    Reference,
}

fn generic_value(ty: &Type, sig: &Signature) -> Option<GenericValue> {
    let generic = |ty: &Type| {
        matches!(strip_groups(ty), Type::ImplTrait(_)) || is_type_param(ty, &sig.generics)
    };
    match strip_groups(ty) {
        Type::Reference(reference) if generic(&reference.elem) => {
            if may_be_unsized(&reference.elem, &sig.generics) {
                Some(GenericValue::Owned)
            } else {
                Some(GenericValue::Reference)
            }
        }
        ty if generic(ty) => Some(GenericValue::Owned),
        _ => None,
    }
}

/// Whether a type parameter or `impl Trait` is declared `?Sized`, inline, in the where clause
/// or in the `impl Trait`'s own bounds.
fn may_be_unsized(ty: &Type, generics: &syn::Generics) -> bool {
    let relaxed = |bound: &syn::TypeParamBound| {
        matches!(bound, syn::TypeParamBound::Trait(bound)
            if matches!(bound.modifier, syn::TraitBoundModifier::Maybe(_)))
    };
    let ty = strip_groups(ty);
    if let Type::ImplTrait(imp) = ty {
        return imp.bounds.iter().any(relaxed);
    }
    let Some(name) = (match ty {
        Type::Path(path) => path.path.get_ident(),
        _ => None,
    }) else {
        return false;
    };
    let inline = generics
        .type_params()
        .filter(|param| param.ident == *name)
        .any(|param| param.bounds.iter().any(relaxed));
    let in_where = generics.where_clause.iter().any(|clause| {
        clause.predicates.iter().any(|predicate| match predicate {
            syn::WherePredicate::Type(predicate) => {
                matches!(strip_groups(&predicate.bounded_ty),
                    Type::Path(path) if path.path.is_ident(name))
                    && predicate.bounds.iter().any(relaxed)
            }
            _ => false,
        })
    });
    inline || in_where
}

fn unknown_placeholder(
    placeholder: &Placeholder,
    root_name: &str,
    params: &Params<'_>,
    sig: &Signature,
) -> String {
    let names = params.suggestable();
    let head = format!(
        "unknown placeholder `{placeholder}` in `key`: `{}` has no parameter named `{root_name}`",
        sig.ident
    );
    if let Some(meant) = suggest::closest(root_name, names.iter().map(String::as_str)) {
        let corrected = Placeholder {
            root: meant.to_owned(),
            fields: placeholder.fields.clone(),
        };
        return format!("{head}; did you mean `{corrected}`?");
    }
    match names.as_slice() {
        [] => format!("{head}; it has no parameters, so the key can only be literal text"),
        names => format!(
            "{head}; its parameters are {}",
            names
                .iter()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `.field`, `.0` or `.method()`. The names carry the key's location with the macro's
/// resolution context: rustc reports a missing field or method at the key, but offers no
/// "replace with" suggestion there, which would overwrite the whole key literal.
///
/// The price is that a misspelled field gets no hint. rustc (1.95) names a type's fields only
/// to a field name in the user's own context, and then offers a similar one as a replacement
/// of that name's span, wherever it points (`key = name`); it lists them in a note only when
/// none is similar, which the macro cannot know. `offset_of!` takes the same path, a struct
/// pattern names no field at all, and a span inside the literal is nightly-only.
fn accessor(field: &str, placeholder: &Placeholder, span: Span) -> syn::Result<TokenStream> {
    let at = Span::mixed_site().located_at(span);
    let dot = syn::Token![.](at);
    if field.bytes().all(|b| b.is_ascii_digit()) {
        let index = field.parse::<u32>().map_err(|_| {
            syn::Error::new(
                span,
                format!("tuple index `{field}` in placeholder `{placeholder}` is too large"),
            )
        })?;
        let member = Member::Unnamed(Index { index, span: at });
        return Ok(quote::quote!(#dot #member));
    }
    let (name, call) = match field.strip_suffix("()") {
        Some(name) => (name, true),
        None => (field, false),
    };
    match syn::parse_str::<Ident>(name) {
        Ok(mut ident) => {
            ident.set_span(at);
            let call = call.then(|| {
                let mut parens = proc_macro2::Group::new(
                    proc_macro2::Delimiter::Parenthesis,
                    TokenStream::new(),
                );
                parens.set_span(at);
                parens
            });
            Ok(quote::quote!(#dot #ident #call))
        }
        Err(_) => Err(syn::Error::new(
            span,
            format!(
                "`{name}` in placeholder `{placeholder}` is not a field name{}",
                if syn::parse_str::<Ident>(&format!("r#{name}")).is_ok() {
                    format!(": it is a keyword, write `r#{name}`")
                } else {
                    String::new()
                }
            ),
        )),
    }
}

/// Whether the manager expression reads a parameter that the body takes by value or by `&mut`
/// (anything but a shared reference). Borrowing such a parameter for the whole call would
/// conflict with the body owning it.
pub(crate) fn reads_owned_param(expr: &syn::Expr, params: &Params<'_>) -> bool {
    let owned_receiver = params
        .receiver
        .is_some_and(|receiver| !is_shared_ref(&receiver.ty));
    let owned: Vec<String> = params
        .named
        .iter()
        .filter(|(_, ty)| !is_shared_ref(ty))
        .map(|(ident, _)| ident.unraw().to_string())
        .chain(
            params
                .in_patterns
                .iter()
                .map(|binding| binding.ident.unraw().to_string()),
        )
        .collect();
    mentions(expr.to_token_stream(), &|ident: &Ident| {
        if ident == "self" {
            owned_receiver
        } else {
            owned.iter().any(|name| ident.unraw() == name)
        }
    })
}

/// The parameter (or `self`) an expression reads, if any: `self` in `self.max_exports`, `max` in
/// `max + 1`. A path through a module (`self::SLOTS`) reads none.
pub(crate) fn param_read_by(expr: &syn::Expr, params: &Params<'_>) -> Option<String> {
    struct Reads<'p, 'a> {
        params: &'p Params<'a>,
        found: Option<String>,
    }
    impl VisitMut for Reads<'_, '_> {
        fn visit_expr_path_mut(&mut self, path: &mut syn::ExprPath) {
            let Some(ident) = path.path.get_ident().filter(|_| path.qself.is_none()) else {
                return;
            };
            let name = ident.unraw().to_string();
            let read = name == "self"
                || self.params.named(&name).is_some()
                || self
                    .params
                    .in_patterns
                    .iter()
                    .any(|b| b.ident.unraw() == name);
            if read && self.found.is_none() {
                self.found = Some(name);
            }
        }
    }
    let mut reads = Reads {
        params,
        found: None,
    };
    reads.visit_expr_mut(&mut expr.clone());
    reads.found
}

fn is_shared_ref(ty: &Type) -> bool {
    matches!(strip_groups(ty), Type::Reference(reference) if reference.mutability.is_none())
}

fn mentions(tokens: TokenStream, hit: &dyn Fn(&Ident) -> bool) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Ident(ident) => hit(&ident),
        TokenTree::Group(group) => mentions(group.stream(), hit),
        _ => false,
    })
}
