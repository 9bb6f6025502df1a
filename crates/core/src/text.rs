//! Small encodings every crate shares, each in one place and each from a kept library: hex
//! (`data-encoding`) for ids, fingerprints, key files and non-UTF-8 names; shell quoting (`shlex`)
//! for every command sheaf writes for a shell or suggests to a person.

use std::borrow::Cow;

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(bytes)
}

/// Bytes from hex, either case; `None` for an odd length or anything but hex digits.
pub fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    data_encoding::HEXLOWER_PERMISSIVE.decode(text).ok()
}

/// `word` quoted for a POSIX shell (as is when it needs no quotes), so that the shell gives it
/// back as one word, whatever it holds (spaces, quotes, `&`, `$`).
///
/// # Panics
/// Never for a Rust string: only a NUL byte cannot be quoted, and it is replaced here by the
/// shell's own `$'\0'`-free form of nothing (a word with a NUL cannot be an argument anyway).
pub fn shell_quote(word: &str) -> Cow<'_, str> {
    match shlex::try_quote(word) {
        Ok(q) => q,
        Err(_) => Cow::Owned(shlex::try_quote(&word.replace('\0', "")).map(Cow::into_owned).unwrap_or_default()),
    }
}

/// `words` quoted and joined with spaces: a command line to paste.
pub fn shell_join<'a>(words: impl IntoIterator<Item = &'a str>) -> String {
    words.into_iter().map(shell_quote).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(unhex(b"00AB10").unwrap(), [0, 0xab, 0x10]);
        assert_eq!(unhex(b"abc"), None);
        assert_eq!(unhex(b"zz"), None);
    }

    #[test]
    fn quoted_words_come_back_whole_from_a_shell_split() {
        assert_eq!(shell_quote("/usr/bin/sheaf"), "/usr/bin/sheaf");
        for w in ["/my dir/it's", "s3://b/p?x=1&y=2", "a$b`c\"d", "", "%p"] {
            let q = shell_quote(w);
            assert_eq!(shlex::split(&q).unwrap(), [w], "{w} as {q}");
        }
        let line = shell_join(["sheaf", "backup", "postgres://h/db?sslmode=require&x=1"]);
        assert_eq!(shlex::split(&line).unwrap(), ["sheaf", "backup", "postgres://h/db?sslmode=require&x=1"]);
        assert!(!line.contains(" postgres://h/db?sslmode=require&x=1"), "the & is quoted: {line}");
    }
}
