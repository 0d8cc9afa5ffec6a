//! Real nodes on one machine: Debian 12 VMs with systemd as PID 1 (`vm/node-image.sh`), booted
//! under qemu (`vm/node-boot.sh`) with their one NIC on the bridge of a namespace testbed
//! ([`Testbed`]), so they reach its nodes and each other and nothing else. A test reaches a
//! VM over SSH from one of its testbed's nodes, with the key the image accepts.
//!
//! [`NodeImage::prepare`] fetches qemu and builds the image (both cached); when either cannot
//! be had the test skips with the reason, and under `CI=true` fails instead.

use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use host::blocking::run_with_deadline;

use crate::netns::Testbed;

/// How long a node may take from qemu's start to answering SSH (TCG: about 50 s here alone).
const BOOT_DEADLINE: Duration = Duration::from_secs(300);
/// How long one SSH command may run.
const SSH_DEADLINE: Duration = Duration::from_secs(120);
/// Tries of one SSH command whose connection failed.
const SSH_TRIES: u32 = 3;
/// The bridge of a [`Testbed`], inside its bridge namespace.
const TESTBED_BRIDGE: &str = "br0";
/// A kernel's id for its current boot.
const BOOT_ID: &str = "cat /proc/sys/kernel/random/boot_id";
/// Host numbers of VMs in the testbed's /24 start here (namespace nodes take 1, 2, ...).
const FIRST_VM_HOST: u8 = 11;

/// The cached node image and the key its root accepts.
#[derive(Debug, Clone)]
pub struct NodeImage {
    /// The cache folder (`vm/fetch.sh`'s), holding `node/`.
    pub cache: PathBuf,
    /// The private key root on every node accepts (the image's own, 0600).
    pub key: PathBuf,
}

impl NodeImage {
    /// Fetches qemu and builds the node image, both cached; `None` (reason printed) when
    /// either cannot be had, which fails under `CI=true`.
    pub fn prepare() -> Result<Option<Self>> {
        let workspace = crate::workspace::workspace_root();
        let cache = std::env::var_os("CONTINUUM_VM_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace.join("target/vm-cache"));
        if let Some(reason) = crate::require_binary("/usr/bin/qemu-img") {
            return skip(&reason);
        }
        for script in ["vm/fetch.sh", "vm/node-image.sh"] {
            let started = Instant::now();
            let mut command = Command::new(workspace.join(script));
            command.env("CONTINUUM_VM_CACHE", &cache);
            let output = run_with_deadline(&mut command, None, Duration::from_secs(900))?;
            println!(
                "$ {script} ({:.1} s)\n{}{}",
                started.elapsed().as_secs_f64(),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            if !output.status.success() {
                return skip(&format!("{script} failed ({})", output.status));
            }
        }
        Ok(Some(Self {
            key: cache.join("node/id_ed25519"),
            cache,
        }))
    }
}

fn skip(reason: &str) -> Result<Option<NodeImage>> {
    if crate::running_in_ci() {
        bail!("{reason} (CI=true: a skip would hide that real nodes are not verified)");
    }
    println!("skipped: {reason}");
    Ok(None)
}

/// One booted node.
#[derive(Debug)]
pub struct NodeVm {
    /// Its hostname.
    pub name: String,
    /// Its address on the testbed's bridge.
    pub address: Ipv4Addr,
    /// Its folder: disk overlay, console log.
    pub dir: PathBuf,
    /// From qemu's last start (or the last reboot's request) to SSH answering.
    pub boot_time: Duration,
    started: Instant,
    qemu: Option<Child>,
    tap: String,
}

/// Nodes booted on a testbed's bridge, reached over SSH from one of its namespace nodes.
/// Dropping it powers every node off (kills its qemu); drop it before the testbed.
#[derive(Debug)]
pub struct NodeVms<'a> {
    testbed: &'a Testbed,
    from: String,
    image: NodeImage,
    dir: PathBuf,
    known_hosts: PathBuf,
    nodes: Vec<NodeVm>,
}

impl<'a> NodeVms<'a> {
    /// Boots one VM per name (in parallel), in `dir`, and waits until each answers SSH from
    /// the testbed node `from`.
    pub fn boot(
        testbed: &'a Testbed,
        from: &str,
        image: &NodeImage,
        dir: &Path,
        names: &[&str],
    ) -> Result<Self> {
        ensure!(
            names.len() < usize::from(255 - FIRST_VM_HOST),
            "too many nodes"
        );
        let known_hosts = dir.join("vm_known_hosts");
        std::fs::write(&known_hosts, "")?;
        let mut vms = Self {
            testbed,
            from: from.to_owned(),
            image: image.clone(),
            dir: dir.to_owned(),
            known_hosts,
            nodes: Vec::new(),
        };
        for (index, name) in names.iter().enumerate() {
            let host = FIRST_VM_HOST + u8::try_from(index).context("node index")?;
            let address = testbed
                .subnet()
                .host(host)
                .context("the testbed's subnet has no such host")?;
            vms.nodes.push(NodeVm {
                name: (*name).to_owned(),
                address,
                dir: dir.join(name),
                boot_time: Duration::ZERO,
                started: Instant::now(),
                qemu: None,
                tap: format!("tap{index}"),
            });
        }
        for index in 0..vms.nodes.len() {
            vms.start_qemu(index)?;
        }
        for index in 0..vms.nodes.len() {
            vms.wait_for_ssh(index)?;
        }
        Ok(vms)
    }

    /// The booted nodes.
    pub fn nodes(&self) -> &[NodeVm] {
        &self.nodes
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> &NodeVm {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node VM {name}"))
    }

    fn index(&self, name: &str) -> Result<usize> {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .with_context(|| format!("no node VM {name}"))
    }

    fn start_qemu(&mut self, index: usize) -> Result<()> {
        let workspace = crate::workspace::workspace_root();
        let prefix = self.testbed.subnet().prefix().prefix_len();
        let node = &mut self.nodes[index];
        let mut command = Command::new(workspace.join("vm/node-boot.sh"));
        command
            .arg(&node.name)
            .arg(format!("{}/{prefix}", node.address))
            .arg(self.testbed.bridge_netns_name())
            .arg(TESTBED_BRIDGE)
            .arg(&node.tap)
            .arg(&node.dir)
            .env("CONTINUUM_VM_CACHE", &self.image.cache)
            .stdout(std::process::Stdio::null())
            .stderr(
                std::fs::File::options()
                    .create(true)
                    .append(true)
                    .open(self.dir.join(format!("{}.qemu.log", node.name)))?,
            )
            .process_group(0);
        // SAFETY: a single system call with constant arguments.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        node.started = Instant::now();
        node.qemu = Some(command.spawn().context("starting vm/node-boot.sh")?);
        Ok(())
    }

    fn wait_for_ssh(&mut self, index: usize) -> Result<()> {
        let address = self.nodes[index].address;
        let started = self.nodes[index].started;
        let deadline = started + BOOT_DEADLINE;
        loop {
            if let Some(status) = self.nodes[index]
                .qemu
                .as_mut()
                .and_then(|q| q.try_wait().ok().flatten())
            {
                // Reaped: its process group is gone and must not be signalled later.
                self.nodes[index].qemu = None;
                bail!(
                    "qemu of {} exited ({status}) before SSH answered: {}",
                    self.nodes[index].name,
                    self.console_tail(index)
                );
            }
            let open = self.testbed.node(&self.from).enter(|| {
                TcpStream::connect_timeout(
                    &(IpAddr::V4(address), 22).into(),
                    Duration::from_secs(2),
                )
                .is_ok()
            })?;
            if open
                && self
                    .ssh_once(index, "true")
                    .is_ok_and(|o| o.status.success())
            {
                self.nodes[index].boot_time = started.elapsed();
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not answer SSH within {} s: {}",
                    self.nodes[index].name,
                    BOOT_DEADLINE.as_secs(),
                    self.console_tail(index)
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The last lines of a node's qemu output and serial console.
    fn console_tail(&self, index: usize) -> String {
        let node = &self.nodes[index];
        format!(
            "qemu: {}\nconsole: {}",
            host::log_tail(&self.dir.join(format!("{}.qemu.log", node.name)), 10),
            host::log_tail(&node.dir.join("console.log"), 30)
        )
    }

    /// `script` over SSH; ssh's own failures (exit 255: no connection, a dropped one) are
    /// tried again twice, as a node under TCG may be slow to accept.
    fn ssh_index(&self, index: usize, script: &str) -> Result<Output> {
        let mut tries = 0;
        loop {
            tries += 1;
            let output = self.ssh_once(index, script)?;
            if output.status.code() != Some(255) || tries == SSH_TRIES {
                return Ok(output);
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    }

    fn ssh_once(&self, index: usize, script: &str) -> Result<Output> {
        let node = &self.nodes[index];
        let mut command = self.testbed.node(&self.from).command("ssh");
        command
            .arg("-i")
            .arg(&self.image.key)
            .args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=5"])
            // A node reset or powered off under a session: noticed within 15 s.
            .args([
                "-o",
                "ServerAliveInterval=5",
                "-o",
                "ServerAliveCountMax=3",
                "-o",
            ])
            .arg(format!("UserKnownHostsFile={}", self.known_hosts.display()))
            .args([
                "-o",
                "StrictHostKeyChecking=accept-new",
                "-o",
                "LogLevel=error",
            ])
            .arg(format!("root@{}", node.address))
            .arg(script);
        Ok(run_with_deadline(&mut command, None, SSH_DEADLINE)?)
    }

    /// Runs `script` as root on node `name` over SSH; its output, whatever its status.
    pub fn ssh(&self, name: &str, script: &str) -> Result<Output> {
        self.ssh_index(self.index(name)?, script)
    }

    /// [`NodeVms::ssh`] that must succeed: its standard output.
    pub fn ssh_ok(&self, name: &str, script: &str) -> Result<String> {
        let output = self.ssh(name, script)?;
        ensure!(
            output.status.success(),
            "on {name}: `{script}` failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Powers node `name` off at once (kills its qemu), as a pulled plug does.
    pub fn power_off(&mut self, name: &str) -> Result<()> {
        let index = self.index(name)?;
        if let Some(mut qemu) = self.nodes[index].qemu.take() {
            kill_group(&mut qemu);
        }
        // Its tap goes with qemu's file descriptor only if qemu made it: this script made it.
        let mut command = Command::new(crate::netns::IP_BINARY);
        command.args([
            "-n",
            self.testbed.bridge_netns_name(),
            "link",
            "del",
            &self.nodes[index].tap,
        ]);
        let output = run_with_deadline(&mut command, None, SSH_DEADLINE)?;
        ensure!(
            output.status.success(),
            "removing {}'s tap: {}",
            name,
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }

    /// Powers node `name` on again (same disk) and waits until it answers SSH; the time.
    pub fn power_on(&mut self, name: &str) -> Result<Duration> {
        let index = self.index(name)?;
        ensure!(self.nodes[index].qemu.is_none(), "{name} is running");
        self.start_qemu(index)?;
        self.wait_for_ssh(index)?;
        Ok(self.nodes[index].boot_time)
    }
}

/// A node rebooting from inside: [`NodeVms::reboot`] starts it, [`NodeVms::rebooted`] waits
/// for the new boot.
#[derive(Debug)]
#[must_use = "wait for the reboot with NodeVms::rebooted"]
pub struct Rebooting {
    index: usize,
    /// The kernel's boot id before the reboot: a new one says the node booted again.
    boot_id: String,
    started: Instant,
}

impl NodeVms<'_> {
    /// Reboots node `name` the way its user would (`systemctl reboot`, so systemd stops its
    /// units first), without waiting for it to come back.
    pub fn reboot(&self, name: &str) -> Result<Rebooting> {
        let index = self.index(name)?;
        let boot_id = self.ssh_ok(name, BOOT_ID)?.trim().to_owned();
        // From a timer of systemd's, so that this SSH session has ended before sshd stops.
        self.ssh_ok(
            name,
            "systemd-run --quiet --on-active=3 --timer-property=AccuracySec=100ms \
             systemctl reboot",
        )?;
        Ok(Rebooting {
            index,
            boot_id,
            started: Instant::now(),
        })
    }

    /// Waits until a rebooting node answers SSH from its new boot; the time since the reboot.
    pub fn rebooted(&mut self, rebooting: Rebooting) -> Result<Duration> {
        let index = rebooting.index;
        loop {
            // A session cut by the reset (an error) is the node not back yet.
            let boot_id = match self.ssh_once(index, BOOT_ID) {
                Ok(answer) if answer.status.success() => {
                    String::from_utf8_lossy(&answer.stdout).trim().to_owned()
                }
                _ => String::new(),
            };
            if !boot_id.is_empty() && boot_id != rebooting.boot_id {
                let took = rebooting.started.elapsed();
                self.nodes[index].boot_time = took;
                return Ok(took);
            }
            if rebooting.started.elapsed() > BOOT_DEADLINE {
                bail!(
                    "{} did not come back within {} s of its reboot: {}",
                    self.nodes[index].name,
                    BOOT_DEADLINE.as_secs(),
                    self.console_tail(index)
                );
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

fn kill_group(child: &mut Child) {
    // Once reaped, its process group id may belong to someone else.
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: signals the process group this harness made for qemu.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.wait();
}

impl Drop for NodeVms<'_> {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut qemu) = node.qemu.take() {
                kill_group(&mut qemu);
            }
        }
    }
}
