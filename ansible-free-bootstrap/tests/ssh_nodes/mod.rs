//! Three "nodes" reachable over real SSH: a namespace testbed where each node runs
//! Debian's `sshd` in a mount namespace of its own whose `/etc`, `/usr/local` and `/var/lib`
//! are overlays. Whatever bootstrap writes on a node lands in that node's upper folders, so
//! the test sees exactly what was installed and, after uninstall, what was left behind,
//! without touching this machine's own folders.

use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use host::blocking::run_with_deadline;
use tests::netns::{NodeProcess, Testbed};

/// The folders overlaid in each node's mount namespace.
pub const OVERLAID: [&str; 3] = ["etc", "usr/local", "var/lib"];
/// Where the agent binary lands on a node, as its processes see it.
pub const AGENT_EXE: &str = "/usr/local/bin/continuum-agent";

/// The testbed: `laptop` runs bootstrap; tester, headnode and worker run sshd.
pub struct SshBed {
    pub testbed: Testbed,
    pub dir: tempfile::TempDir,
    sshd: Vec<NodeProcess>,
    /// What each node's upper folders held before bootstrap ran (a test's own setup).
    baseline: std::collections::HashMap<String, Vec<String>>,
}

pub const NODES: [&str; 3] = ["tester", "headnode", "worker"];

impl SshBed {
    /// Builds the testbed, the client key, host keys and starts sshd on every node.
    pub fn start(prefix: &str) -> Result<Self> {
        let names: Vec<_> = NODES
            .iter()
            .chain(&["laptop"])
            .map(|n| (*n).into())
            .collect();
        let testbed = Testbed::build(prefix, &names)?;
        let dir = tempfile::tempdir()?;
        keygen(&dir.path().join("client_key"))?;
        keygen(&dir.path().join("other_key"))?;
        fs::copy(
            dir.path().join("client_key.pub"),
            dir.path().join("authorized_keys"),
        )?;
        // sshd refuses to run without its privilege-separation folder (systemd makes it).
        fs::create_dir_all("/run/sshd")?;
        let mut sshd = Vec::new();
        for name in NODES {
            let root = dir.path().join(name);
            for folder in OVERLAID {
                fs::create_dir_all(root.join("upper").join(folder))?;
                fs::create_dir_all(root.join("work").join(folder))?;
            }
            keygen(&root.join("host_key"))?;
            let node = testbed.node(name);
            fs::write(
                root.join("sshd_config"),
                sshd_config(dir.path(), &root, node.addr()),
            )?;
            let mounts: Vec<String> = OVERLAID
                .iter()
                .map(|folder| {
                    format!(
                        "mount -t overlay overlay -o lowerdir=/{folder},upperdir={root}/upper/{folder},workdir={root}/work/{folder} /{folder}",
                        root = root.display()
                    )
                })
                .collect();
            let script = format!(
                "set -e\n{}\nexec /usr/sbin/sshd -D -e -f {}/sshd_config",
                mounts.join("\n"),
                root.display()
            );
            let mut command = node.command("unshare");
            command
                .args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg(script)
                .stdout(std::process::Stdio::null())
                .stderr(fs::File::create(root.join("sshd.log"))?);
            sshd.push(node.spawn(&mut command)?);
        }
        let bed = SshBed {
            testbed,
            dir,
            sshd,
            baseline: Default::default(),
        };
        for name in NODES {
            bed.wait_for_sshd(name)?;
        }
        Ok(bed)
    }

    fn wait_for_sshd(&self, name: &str) -> Result<()> {
        let addr = self.testbed.node(name).addr();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let up = self
                .testbed
                .node("laptop")
                .enter(|| std::net::TcpStream::connect((addr, 22)).is_ok())?;
            if up {
                return Ok(());
            }
            if Instant::now() > deadline {
                let log = fs::read_to_string(self.root(name).join("sshd.log")).unwrap_or_default();
                bail!("sshd on {name} did not listen within 10 s: {log}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A node's folder (upper dirs, host key, sshd config).
    pub fn root(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The known_hosts line of every node (what an admin would have after first contact).
    pub fn known_hosts(&self) -> Result<String> {
        let mut text = String::new();
        for name in NODES {
            let key = fs::read_to_string(self.root(name).join("host_key.pub"))?;
            let mut fields = key.split_whitespace();
            let (kind, body) = (fields.next().unwrap_or(""), fields.next().unwrap_or(""));
            text.push_str(&format!(
                "{} {kind} {body}\n",
                self.testbed.node(name).addr()
            ));
        }
        Ok(text)
    }

    /// An inventory for the three nodes with `key` and `known_hosts`.
    pub fn inventory(
        &self,
        key: &str,
        known_hosts: &Path,
        addresses: &[(&str, Ipv4Addr)],
    ) -> String {
        let mut text = format!(
            "state_dir = {:?}\n[ssh]\nkey = {:?}\nknown_hosts = {:?}\nconnect_timeout = \"3s\"\n",
            self.dir.path().join("state"),
            self.dir.path().join(key),
            known_hosts,
        );
        for (index, name) in NODES.iter().enumerate() {
            let address = addresses
                .iter()
                .find(|(n, _)| n == name)
                .map_or(self.testbed.node(name).addr(), |(_, a)| *a);
            let role = ["tester", "headnode", "worker"][index];
            text.push_str(&format!(
                "\n[[nodes]]\nname = {name:?}\naddress = \"{address}\"\narch = {:?}\nrole = {role:?}\n\
                 data_interface = \"eth0\"\noverlay_ip = \"198.19.0.{}/24\"\n",
                std::env::consts::ARCH,
                index + 1
            ));
        }
        text
    }

    /// Runs `bootstrap ARGS` in the laptop node.
    pub fn bootstrap(&self, args: &[&str]) -> Result<Output> {
        let mut command = self
            .testbed
            .node("laptop")
            .command(env!("CARGO_BIN_EXE_bootstrap"));
        command
            .args(args)
            .env("HOME", self.dir.path())
            .env("RUST_LOG", "bootstrap=info");
        let started = Instant::now();
        let output = run_with_deadline(&mut command, None, Duration::from_secs(180))?;
        println!(
            "$ bootstrap {} ({:.1} s)\n{}{}",
            args.join(" "),
            started.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(output)
    }

    /// What a node's upper folders hold that the machine itself does not: files of any kind,
    /// and folders that do not exist outside the overlay. Empty = the node is as it was.
    pub fn left_behind(&self, name: &str) -> Result<Vec<String>> {
        let mut found = self.upper_contents(name)?;
        if let Some(baseline) = self.baseline.get(name) {
            found.retain(|entry| !baseline.contains(entry));
        }
        Ok(found)
    }

    /// Makes a login `user` with passwordless sudo on a node (as on a Raspberry Pi), and
    /// takes what that wrote as the node's baseline for [`SshBed::left_behind`].
    pub fn add_sudo_user(&mut self, name: &str, user: &str) -> Result<()> {
        self.on_node(
            name,
            &format!(
                "useradd -M -s /bin/sh {user}\nusermod -p '*' {user}\n\
                 echo '{user} ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/{user}\n\
                 chmod 0440 /etc/sudoers.d/{user}\n"
            ),
        )?;
        let contents = self.upper_contents(name)?;
        self.baseline.insert(name.to_string(), contents);
        Ok(())
    }

    fn upper_contents(&self, name: &str) -> Result<Vec<String>> {
        let mut found = Vec::new();
        for folder in OVERLAID {
            let upper = self.root(name).join("upper").join(folder);
            walk(
                &upper,
                &upper,
                Path::new("/").join(folder).as_path(),
                &mut found,
            )?;
        }
        Ok(found)
    }

    /// Runs `script` with `sh -e` in a node's mount namespace (its overlays), as the node
    /// sees its files: writing to the upper folders directly would bypass the overlay.
    pub fn on_node(&self, name: &str, script: &str) -> Result<()> {
        let index = NODES
            .iter()
            .position(|n| *n == name)
            .context("a node name")?;
        let pid = self.sshd[index].id().to_string();
        let output = Command::new("nsenter")
            .args(["-t", &pid, "-m", "sh", "-e", "-c", script])
            .output()
            .context("running nsenter")?;
        ensure!(
            output.status.success(),
            "on {name}: {script}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }

    /// The PID in a node's agent PID file, if any.
    pub fn agent_pid(&self, name: &str) -> Option<u32> {
        fs::read_to_string(
            self.root(name)
                .join("upper/var/lib/continuum-agent/agent.pid"),
        )
        .ok()
        .and_then(|text| text.trim().parse().ok())
    }
}

impl Drop for SshBed {
    /// Detached agents are not sshd's children once started: kill any still running, so a
    /// failed test leaves no process behind.
    fn drop(&mut self) {
        for pid in agent_processes() {
            host::kill(pid);
        }
        self.sshd.clear();
    }
}

/// Processes running the installed agent binary (as their mount namespace names it).
pub fn agent_processes() -> Vec<u32> {
    host::running_processes()
        .into_iter()
        .filter(|pid| {
            fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|exe| exe.to_string_lossy().trim_end_matches(" (deleted)") == AGENT_EXE)
        })
        .collect()
}

fn walk(base: &Path, dir: &Path, lower_root: &Path, found: &mut Vec<String>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let path = entry.path();
        let relative = path.strip_prefix(base)?;
        let outside = lower_root.join(relative);
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if !outside.is_dir() {
                found.push(format!("folder {}", outside.display()));
            }
            walk(base, &path, lower_root, found)?;
        } else {
            found.push(format!("file {}", outside.display()));
        }
    }
    Ok(())
}

fn keygen(path: &Path) -> Result<()> {
    let output = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "continuum-test",
            "-f",
        ])
        .arg(path)
        .output()
        .context("running ssh-keygen")?;
    ensure!(
        output.status.success(),
        "ssh-keygen: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

fn sshd_config(dir: &Path, root: &Path, addr: Ipv4Addr) -> String {
    format!(
        "ListenAddress {addr}:22\n\
         HostKey {root}/host_key\n\
         AuthorizedKeysFile {dir}/authorized_keys\n\
         PidFile {root}/sshd.pid\n\
         PermitRootLogin prohibit-password\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         PubkeyAuthentication yes\n\
         UsePAM no\n\
         StrictModes no\n\
         MaxSessions 30\n\
         MaxStartups 30:30:60\n",
        root = root.display(),
        dir = dir.display(),
    )
}
