//! The name rule: what a node, broker, scenario, plan or agent may be called. Names end up in
//! file and folder names, Erlang node names and certificate names, so one rule holds for all;
//! identities (certificates) may also hold dots (`node.lab`) and never be `ca`, whose files
//! share their folder.

use std::fmt;

/// Longest accepted name.
pub const MAX_NAME_LEN: usize = 64;

/// Why a name breaks the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameError {
    /// Empty, or longer than [`MAX_NAME_LEN`].
    Length,
    /// It starts with something else than a letter or digit (a file name `-x` reads as an
    /// option, `.x` is hidden).
    Start,
    /// A character outside letters, digits, '-' and '_' (and '.' in an identity).
    Character(char),
    /// `ca`, reserved for the CA's own files beside the identities.
    Reserved,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Length => write!(f, "must be 1 to {MAX_NAME_LEN} characters"),
            NameError::Start => f.write_str("must start with a letter or digit"),
            NameError::Character(bad) => {
                write!(f, "contains {bad:?}; use letters, digits, '-' and '_' only")
            }
            NameError::Reserved => f.write_str("is reserved for the CA's own files"),
        }
    }
}

impl std::error::Error for NameError {}

/// Checks `name` against the rule: 1 to [`MAX_NAME_LEN`] ASCII letters, digits, '-' and
/// '_', starting with a letter or digit.
pub fn check_name(name: &str) -> Result<(), NameError> {
    check(name, false)
}

/// Checks an identity's name: the name rule, with '.' allowed too, and not `ca`.
pub fn check_identity_name(name: &str) -> Result<(), NameError> {
    check(name, true)?;
    if name == "ca" {
        return Err(NameError::Reserved);
    }
    Ok(())
}

fn check(name: &str, dots: bool) -> Result<(), NameError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(NameError::Length);
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(NameError::Start);
    }
    if let Some(bad) = name
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || (dots && c == '.')))
    {
        return Err(NameError::Character(bad));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_digits_dash_and_underscore_pass_and_nothing_else() {
        for good in ["a", "bench-1_a", "Worker2", &"x".repeat(MAX_NAME_LEN)] {
            assert_eq!(check_name(good), Ok(()), "{good:?}");
        }
        assert_eq!(check_name(""), Err(NameError::Length));
        assert_eq!(check_name(&"x".repeat(65)), Err(NameError::Length));
        for (bad, char) in [("a/b", '/'), ("a..x", '.'), ("a b", ' '), ("aä", 'ä')] {
            assert_eq!(check_name(bad), Err(NameError::Character(char)), "{bad:?}");
        }
        assert_eq!(check_name("-x"), Err(NameError::Start));
        assert_eq!(check_name("../x"), Err(NameError::Start));
        assert_eq!(check_name("ä"), Err(NameError::Start));
        assert_eq!(check_name("_x"), Err(NameError::Start));
        assert_eq!(check_name("node.lab"), Err(NameError::Character('.')));
        assert_eq!(check_identity_name("node.lab"), Ok(()));
        assert_eq!(check_identity_name(".hidden"), Err(NameError::Start));
        assert_eq!(check_identity_name("ca"), Err(NameError::Reserved));
        assert_eq!(
            NameError::Character('/').to_string(),
            "contains '/'; use letters, digits, '-' and '_' only"
        );
    }
}
