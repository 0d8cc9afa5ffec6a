//! System accounts a child can run as: a broker package's service user (`vernemq`), looked up
//! by name the way `su` would, through NSS.

use std::ffi::CString;

/// A user to run a child as: its user id and primary group id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Account {
    /// The user id.
    pub uid: u32,
    /// The primary group id.
    pub gid: u32,
}

impl Account {
    /// The account called `name`, or `None` when there is no such user.
    pub fn lookup(name: &str) -> std::io::Result<Option<Self>> {
        let c_name = CString::new(name).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "a user name with NUL")
        })?;
        // SAFETY: passwd is plain old data; getpwnam_r fills it, pointing into `buffer`,
        // which outlives every read of it below.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let mut buffer = vec![0u8; 4096];
        loop {
            // SAFETY: every pointer is valid for the length given; `found` is set to `&entry`
            // or to null.
            let status = unsafe {
                libc::getpwnam_r(
                    c_name.as_ptr(),
                    &mut entry,
                    buffer.as_mut_ptr().cast(),
                    buffer.len(),
                    &mut found,
                )
            };
            match status {
                0 if found.is_null() => return Ok(None),
                0 => {
                    return Ok(Some(Self {
                        uid: entry.pw_uid,
                        gid: entry.pw_gid,
                    }));
                }
                libc::ERANGE if buffer.len() < 1 << 20 => buffer.resize(buffer.len() * 2, 0),
                // Some NSS modules report "no such user" as one of these.
                libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(None),
                error => return Err(std::io::Error::from_raw_os_error(error)),
            }
        }
    }

    /// The account this process runs as (its effective ids).
    pub fn current() -> Self {
        // SAFETY: geteuid and getegid cannot fail.
        unsafe {
            Self {
                uid: libc::geteuid(),
                gid: libc::getegid(),
            }
        }
    }

    /// Whether this process runs as root, and so may start children as other users.
    pub fn is_root() -> bool {
        Self::current().uid == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_missing_users_are_told_apart() {
        let root = Account::lookup("root")
            .expect("lookup")
            .expect("root exists");
        assert_eq!(root, Account { uid: 0, gid: 0 });
        assert_eq!(
            Account::lookup("no-such-user-continuum").expect("lookup"),
            None
        );
        assert!(Account::lookup("a\0b").is_err());
    }
}
