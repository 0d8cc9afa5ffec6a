//! Proves the namespace testbed: nodes reach each other over the bridge and
//! nothing else, code run "in" a node really is in its namespace, parallel
//! testbeds never share addresses, and teardown leaves nothing behind.
//!
//! Every test runs in a process isolated in a network namespace with only
//! `lo` ([`isolated_netns_test!`]), needs root (skipped with a reason
//! otherwise, failed under CI), and bounds every wait. Traffic goes only
//! between namespaces the test made; the one connect aimed elsewhere is made
//! where there is no route, so it fails at once with ENETUNREACH and sends
//! nothing. The machine's namespace is only read (its addresses and routes).

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

use host::blocking::run_with_deadline;
use host::is_running;
use tests::netns::addr::{parse_ip_addr_output, parse_ip_route_output};
use tests::netns::{
    BENCHMARK_RANGE, IP_BINARY, Ipv4Prefix, Subnet, Testbed, list_netns, netns_inode,
    outer_netns_path,
};
use tests::{isolated_netns_test, skip_unless_installed};

const NSENTER: &str = "/usr/bin/nsenter";
const IO_DEADLINE: Duration = Duration::from_secs(10);
const COMMAND_DEADLINE: Duration = Duration::from_secs(20);
/// A refused connect must fail this fast: no packet, no waiting for one.
const IMMEDIATELY: Duration = Duration::from_secs(1);

/// Echoes every byte of `connections` connections back, concurrently, and
/// returns the peers' addresses.
async fn echo_server(listener: TcpListener, connections: usize) -> Result<Vec<SocketAddr>> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let mut echoes = tokio::task::JoinSet::new();
    let mut peers = Vec::new();
    for _ in 0..connections {
        let (stream, peer) = timeout(IO_DEADLINE, listener.accept())
            .await
            .context("no connection came")??;
        peers.push(peer);
        echoes.spawn(async move {
            let (mut reader, mut writer) = stream.into_split();
            tokio::io::copy(&mut reader, &mut writer).await?;
            writer.shutdown().await
        });
    }
    timeout(IO_DEADLINE, async {
        while let Some(echo) = echoes.join_next().await {
            echo??;
        }
        anyhow::Ok(())
    })
    .await
    .context("echoing took too long")??;
    Ok(peers)
}

/// Sends `payload` to the echo server at `to` and returns this end's address
/// and what came back.
async fn echo_client(to: SocketAddr, payload: Vec<u8>) -> Result<(SocketAddr, Vec<u8>)> {
    let mut stream = timeout(IO_DEADLINE, tokio::net::TcpStream::connect(to))
        .await
        .with_context(|| format!("connecting to {to} took too long"))??;
    let local = stream.local_addr()?;
    let (mut reader, mut writer) = stream.split();
    let mut echoed = Vec::new();
    let send = async {
        writer.write_all(&payload).await?;
        writer.shutdown().await
    };
    timeout(IO_DEADLINE, async {
        tokio::try_join!(send, reader.read_to_end(&mut echoed))
    })
    .await
    .context("the echo took too long")??;
    Ok((local, echoed))
}

/// 256 KiB that differ for every (client, server) pair.
fn payload(client: usize, server: usize) -> Vec<u8> {
    (0..256 * 1024)
        .map(|i: usize| (i.wrapping_mul(31) ^ (client * 7 + server)) as u8)
        .collect()
}

/// Connects (from the calling thread's namespace) to `target` and returns
/// the error and how long it took to fail. Panics if it connects.
fn failed_connect(target: Ipv4Addr) -> (io::Error, Duration) {
    let started = Instant::now();
    let result = std::net::TcpStream::connect_timeout(&SocketAddr::from((target, 9)), IO_DEADLINE);
    let Err(error) = result else {
        panic!("connected to {target}, which must be unreachable");
    };
    (error, started.elapsed())
}

fn assert_unreachable_at_once((error, took): (io::Error, Duration), what: &str) {
    assert_eq!(
        error.raw_os_error(),
        Some(libc::ENETUNREACH),
        "{what}: expected ENETUNREACH, got {error}"
    );
    assert!(took < IMMEDIATELY, "{what}: failing took {took:?}");
}

/// Runs `command`, requiring success, and returns its stdout.
fn stdout_of(command: &mut Command) -> String {
    let output = run_with_deadline(command, None, COMMAND_DEADLINE).expect("command runs");
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// `ip ARGS` read from the machine's (the outer test process's) network
/// namespace.
fn outer_ip(outer_netns: &Path, args: &[&str]) -> String {
    stdout_of(
        Command::new(NSENTER)
            .arg(format!("--net={}", outer_netns.display()))
            .arg(IP_BINARY)
            .args(args),
    )
}

fn thread_netns() -> u64 {
    netns_inode(Path::new("/proc/thread-self/ns/net")).expect("own namespace")
}

#[test]
fn three_nodes_echo_to_each_other() {
    isolated_netns_test!();
    let testbed =
        Testbed::build("echo", &["a".into(), "b".into(), "c".into()]).expect("the testbed builds");
    let nodes = testbed.nodes();
    // Bound in each node's namespace, served from threads in the same one.
    let listeners: Vec<TcpListener> = nodes
        .iter()
        .map(|node| {
            node.enter(|| TcpListener::bind((node.addr(), 0)))
                .expect("entering the node")
                .expect("binding the node's address")
        })
        .collect();
    let servers: Vec<SocketAddr> = listeners
        .iter()
        .map(|listener| listener.local_addr().expect("bound"))
        .collect();

    thread::scope(|scope| {
        let server_threads: Vec<_> = nodes
            .iter()
            .zip(listeners)
            .map(|(node, listener)| {
                scope.spawn(move || node.run_in(move || echo_server(listener, nodes.len() - 1)))
            })
            .collect();
        let mut clients = Vec::new();
        for (from, client) in nodes.iter().enumerate() {
            for (to, &server) in servers.iter().enumerate().filter(|(to, _)| *to != from) {
                let sent = payload(from, to);
                let handle = scope.spawn({
                    let sent = sent.clone();
                    move || client.run_in(move || echo_client(server, sent))
                });
                clients.push((from, to, sent, handle));
            }
        }
        for (from, to, sent, handle) in clients {
            let (local, echoed) = handle
                .join()
                .expect("client thread")
                .expect("running in the node")
                .unwrap_or_else(|error| panic!("echo {from} -> {to}: {error:#}"));
            assert_eq!(
                local.ip(),
                nodes[from].addr(),
                "client {from} used its own address"
            );
            assert!(echoed == sent, "echo {from} -> {to} came back changed");
        }
        for (at, handle) in server_threads.into_iter().enumerate() {
            let mut peers: Vec<_> = handle
                .join()
                .expect("server thread")
                .expect("running in the node")
                .unwrap_or_else(|error| panic!("server {at}: {error:#}"))
                .iter()
                .map(SocketAddr::ip)
                .collect();
            peers.sort();
            let others: Vec<std::net::IpAddr> = nodes
                .iter()
                .enumerate()
                .filter(|(index, _)| *index != at)
                .map(|(_, node)| node.addr().into())
                .collect();
            assert_eq!(
                peers, others,
                "server {at} saw every other node, by its address"
            );
        }
    });
    testbed.teardown().expect("clean teardown");
}

#[test]
fn sockets_threads_and_processes_belong_to_their_node() {
    isolated_netns_test!();
    let testbed = Testbed::build("owner", &["a".into(), "b".into()]).expect("the testbed builds");
    let (a, b) = (testbed.node("a"), testbed.node("b"));
    let a_netns = netns_inode(&a.netns_path()).expect("a's namespace");
    let b_netns = netns_inode(&b.netns_path()).expect("b's namespace");
    assert_ne!(a_netns, b_netns);
    assert_ne!(thread_netns(), a_netns, "the test thread stays outside");

    let entered = a.run_in(|| async { thread_netns() }).expect("run_in");
    assert_eq!(entered, a_netns, "run_in's thread is in a's namespace");

    // a's address exists only in a: binding it elsewhere fails.
    let bound = a
        .run_in(|| async {
            tokio::net::TcpListener::bind((a.addr(), 0))
                .await?
                .local_addr()
        })
        .expect("run_in")
        .expect("a binds its own address");
    assert_eq!(bound.ip(), a.addr());
    let in_b = b
        .run_in(|| async { tokio::net::TcpListener::bind((a.addr(), 0)).await.map(drop) })
        .expect("run_in");
    assert_eq!(
        in_b.err().and_then(|e| e.raw_os_error()),
        Some(libc::EADDRNOTAVAIL)
    );
    let here = TcpListener::bind((a.addr(), 0)).map(drop);
    assert_eq!(
        here.err().and_then(|e| e.raw_os_error()),
        Some(libc::EADDRNOTAVAIL)
    );

    // A command runs in the node: it sees the node's link and address.
    let shown = stdout_of(
        a.command(IP_BINARY)
            .args(["-4", "-o", "addr", "show", "dev", "eth0"]),
    );
    let addresses = parse_ip_addr_output(&shown).expect("ip addr output");
    assert_eq!(addresses, [(a.addr(), testbed.subnet().prefix())]);

    // So does a spawned one, once `ip netns exec` has entered the namespace.
    let sleeper = a.spawn(a.command("sleep").arg("60")).expect("spawn");
    let proc_netns = PathBuf::from(format!("/proc/{}/ns/net", sleeper.id()));
    let deadline = Instant::now() + IO_DEADLINE;
    while netns_inode(&proc_netns).ok() != Some(a_netns) {
        assert!(
            Instant::now() < deadline,
            "the spawned process never entered a"
        );
        thread::sleep(Duration::from_millis(10));
    }
    assert!(
        b.spawn(&mut a.command("sleep")).is_err(),
        "b refuses a command made for a"
    );
    drop(sleeper);
    testbed.teardown().expect("clean teardown");
}

#[test]
fn nothing_outside_the_testbed_is_reachable() {
    skip_unless_installed!(NSENTER);
    isolated_netns_test!();
    let testbed = Testbed::build("fence", &["a".into(), "b".into()]).expect("the testbed builds");
    let subnet = testbed.subnet();
    let loopback: Ipv4Prefix = "127.0.0.0/8".parse().expect("prefix");

    // The machine's namespace has no address and no route of its own in
    // the benchmark range (its default route is why it must never send
    // there), while the testbed exists.
    let outer = outer_netns_path().expect("running isolated");
    assert_ne!(
        netns_inode(&outer).expect("outer namespace"),
        thread_netns()
    );
    let outer_addresses = parse_ip_addr_output(&outer_ip(&outer, &["-4", "-o", "addr", "show"]))
        .expect("ip addr output");
    for (addr, prefix) in &outer_addresses {
        assert!(
            !BENCHMARK_RANGE.contains(*addr) && !BENCHMARK_RANGE.overlaps(prefix),
            "the machine has {addr} on {prefix}"
        );
    }
    let outer_routes =
        parse_ip_route_output(&outer_ip(&outer, &["-4", "route", "show", "table", "all"]))
            .expect("ip route output");
    for route in outer_routes.iter().filter(|route| !route.is_default()) {
        assert!(
            !BENCHMARK_RANGE.overlaps(route),
            "the machine routes {route}"
        );
    }

    // A node knows only its /24 and loopback: no default route.
    for node in testbed.nodes() {
        let routes = parse_ip_route_output(&stdout_of(Command::new(IP_BINARY).args([
            "-n",
            node.netns_name(),
            "-4",
            "route",
            "show",
            "table",
            "all",
        ])))
        .expect("ip route output");
        assert!(
            routes.contains(&subnet.prefix()),
            "{} routes its /24",
            node.name()
        );
        for route in &routes {
            assert!(
                subnet.prefix().overlaps(route) && route.prefix_len() >= 24
                    || loopback.overlaps(route),
                "{} has a route to {route}",
                node.name()
            );
        }
    }

    // So from a node, a benchmark address outside the /24 fails at once.
    let outside = Subnet::from_index((subnet.index() + Subnet::COUNT / 2) % Subnet::COUNT)
        .and_then(|other| other.host(1))
        .expect("an address outside the testbed");
    assert!(!subnet.prefix().contains(outside));
    let refused = testbed
        .node("a")
        .enter(|| failed_connect(outside))
        .expect("enter");
    assert_unreachable_at_once(refused, "a node to outside its /24");

    // And the test process itself, with only lo, reaches no node at all.
    assert_unreachable_at_once(
        failed_connect(testbed.node("b").addr()),
        "the isolated test process to a node",
    );
    testbed.teardown().expect("clean teardown");
}

#[test]
fn parallel_testbeds_get_disjoint_subnets() {
    isolated_netns_test!();
    const TESTBEDS: usize = 4;
    let testbeds: Vec<Testbed> = thread::scope(|scope| {
        let builders: Vec<_> = (0..TESTBEDS)
            .map(|_| scope.spawn(|| Testbed::build("parallel", &["a".into(), "b".into()])))
            .collect();
        builders
            .into_iter()
            .map(|builder| builder.join().expect("builder").expect("a testbed builds"))
            .collect()
    });
    for (index, testbed) in testbeds.iter().enumerate() {
        for other in &testbeds[index + 1..] {
            assert_ne!(testbed.subnet(), other.subnet());
            assert!(!testbed.subnet().prefix().overlaps(&other.subnet().prefix()));
            for name in testbed.netns_names() {
                assert!(!other.netns_names().contains(&name), "{name} is shared");
            }
        }
        for node in testbed.nodes() {
            assert!(testbed.subnet().prefix().contains(node.addr()));
            assert!(BENCHMARK_RANGE.contains(node.addr()));
        }
    }

    // Testbeds are apart: a node cannot reach another testbed's node.
    let (first, second) = (&testbeds[0], &testbeds[1]);
    let target = second.node("a").addr();
    let refused = first
        .node("a")
        .enter(|| failed_connect(target))
        .expect("enter");
    assert_unreachable_at_once(refused, "a node to another testbed");
    for testbed in testbeds {
        testbed.teardown().expect("clean teardown");
    }
}

#[test]
fn dropping_a_testbed_leaves_nothing() {
    skip_unless_installed!(NSENTER);
    isolated_netns_test!();
    let testbed = Testbed::build("cleanup", &["a".into(), "b".into()]).expect("the testbed builds");
    let names: Vec<String> = testbed
        .netns_names()
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(names.len(), 3, "two nodes and the bridge");
    let listed = list_netns().expect("ip netns list");
    for name in &names {
        assert!(
            listed.contains(name),
            "{name} is listed while the testbed lives"
        );
    }
    let a = testbed.node("a");
    let sleeper = a.spawn(a.command("sleep").arg("60")).expect("spawn");
    let orphan = a.spawn(a.command("sleep").arg("60")).expect("spawn");
    let pids = [sleeper.id(), orphan.id()];
    // A process whose handle is forgotten is still found by its tag.
    std::mem::forget(orphan);

    drop(testbed);
    for pid in pids {
        assert!(!is_running(pid), "process {pid} outlived its testbed");
    }
    let listed = list_netns().expect("ip netns list");
    for name in &names {
        assert!(!listed.contains(name), "{name} is still listed");
        assert!(
            !Path::new("/run/netns").join(name).exists(),
            "{name} is still in /run/netns"
        );
    }
    drop(sleeper);

    // The machine's own `ip netns list` never showed them: they lived in
    // this process's private /run/netns.
    let outer_mounts = outer_netns_path()
        .expect("running isolated")
        .with_file_name("mnt");
    let machine = stdout_of(
        Command::new(NSENTER)
            .arg(format!("--mount={}", outer_mounts.display()))
            .args([IP_BINARY, "netns", "list"]),
    );
    for name in &names {
        assert!(!machine.contains(name.as_str()), "the machine lists {name}");
    }
}
