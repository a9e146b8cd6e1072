//! The shard's ring on real loopback sockets: bytes in order across
//! buffers and reads, the end of the stream, the per-connection cap, the
//! wait for buffers when the shard's run out, the slot's release.

use super::*;
use crate::driver::{block_on, Driver, StartError};
use crate::transport::{ReadSpare, WriteAll};
use crate::uring::stream::RingStream;
use std::io::{Read, Write};

/// Runs `f` on an io_uring runtime with `ring` driven; `None` where this
/// kernel or sandbox has no io_uring (the ring is io_uring only).
fn on_ring<F, Fut>(count: u16, bytes: usize, f: F) -> Option<Fut::Output>
where
    F: FnOnce(Rc<ShardRing>) -> Fut,
    Fut: Future,
{
    let ran = block_on(Driver::IoUring, 256, |_| async move {
        let ring = match ShardRing::with_buffers(count, bytes) {
            Ok(r) => r,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => return None,
            Err(e) => panic!("{e}"),
        };
        let driver = monoio::spawn(ring.clone().drive());
        let out = f(ring).await;
        drop(driver);
        Some(out)
    });
    match ran {
        Ok(out) => out,
        Err(StartError::RingRequired(_)) => None,
        Err(e) => panic!("{e:?}"),
    }
}

/// A connected pair: the server's end as a runtime stream, the peer's as
/// a blocking std stream.
async fn pair() -> (monoio::net::TcpStream, std::net::TcpStream) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (ours, _) = l.accept().unwrap();
    ours.set_nonblocking(true).unwrap();
    (monoio::net::TcpStream::from_std(ours).unwrap(), peer)
}

/// Reads until the end of the stream, `chunk` bytes of room at a time.
async fn read_to_end<R: ReadSpare>(r: &mut R, chunk: usize) -> Vec<u8> {
    let mut all = Vec::new();
    loop {
        let (res, buf) = r.read_spare(Vec::with_capacity(chunk)).await;
        let n = res.unwrap();
        assert_eq!(n, buf.len());
        assert!(n <= chunk);
        if n == 0 {
            return all;
        }
        all.extend_from_slice(&buf);
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn bytes_come_in_order_across_buffers_and_reads_then_the_end() {
    let got = on_ring(64, 256, |ring| async move {
        let (tcp, mut peer) = pair().await;
        let mut s = RingStream::open(&ring, tcp).map_err(|_| ()).unwrap();
        let sent = pattern(10_000, 1);
        peer.write_all(&sent[..3000]).unwrap();
        let (res, first) = s.read_spare(Vec::with_capacity(1000)).await;
        assert_eq!(res.unwrap(), 1000);
        assert_eq!(first, sent[..1000]);
        peer.write_all(&sent[3000..]).unwrap();
        drop(peer);
        let rest = read_to_end(&mut s, 777).await;
        assert_eq!(rest, sent[1000..]);
        // The end stays the end.
        let (res, _) = s.read_spare(Vec::with_capacity(8)).await;
        assert_eq!(res.unwrap(), 0);
        ring.counts()
    });
    if let Some(counts) = got {
        assert_eq!(counts.starved, 0);
        assert!(counts.arms >= 1);
    }
}

#[test]
fn a_connection_past_its_cap_stops_receiving_until_it_is_read() {
    // 64-byte buffers: the cap is 4 × 64 = 256 bytes.
    let got = on_ring(128, 64, |ring| async move {
        let (tcp, mut peer) = pair().await;
        let sent = pattern(4096, 2);
        // In the socket before the receive is armed: the first receive
        // finds it all and stops at the cap.
        peer.write_all(&sent).unwrap();
        let mut s = RingStream::open(&ring, tcp).map_err(|_| ()).unwrap();
        s.ready().await;
        let capped = ring.counts().capped;
        let held = ring.inner.borrow().slots[0].queued;
        peer.shutdown(std::net::Shutdown::Write).unwrap();
        let all = read_to_end(&mut s, 100).await;
        assert_eq!(all, sent);
        (capped, held, ring.counts())
    });
    if let Some((capped, held, counts)) = got {
        assert_eq!(capped, 1);
        // At least the cap, and what the kernel posted before the
        // cancellation landed (the shard's buffers bound it).
        assert!((256..=4096).contains(&held), "{held}");
        // Armed again once drained, to read the end.
        assert_eq!(counts.arms, 2, "{counts:?}");
    }
}

#[test]
fn receives_wait_for_buffers_when_the_shard_has_none_left() {
    // 4 buffers of 64 bytes for the whole shard.
    let got = on_ring(4, 64, |ring| async move {
        let (a_tcp, mut a_peer) = pair().await;
        let (b_tcp, mut b_peer) = pair().await;
        let (a_sent, b_sent) = (pattern(200, 3), pattern(200, 4));
        a_peer.write_all(&a_sent).unwrap();
        b_peer.write_all(&b_sent).unwrap();
        drop((a_peer, b_peer));
        // Armed in this order in one submission: `a` takes every buffer.
        let mut a = RingStream::open(&ring, a_tcp).map_err(|_| ()).unwrap();
        let mut b = RingStream::open(&ring, b_tcp).map_err(|_| ()).unwrap();
        a.ready().await;
        let starved = ring.counts().starved;
        let a_got = read_to_end(&mut a, 50).await;
        let b_got = read_to_end(&mut b, 50).await;
        (starved, a_got == a_sent, b_got == b_sent, ring.counts())
    });
    if let Some((starved, a_ok, b_ok, counts)) = got {
        assert!(starved >= 1, "{counts:?}");
        assert!(a_ok && b_ok);
    }
}

#[test]
fn a_dropped_stream_gives_its_slot_and_buffers_back() {
    let got = on_ring(8, 64, |ring| async move {
        let (tcp, mut peer) = pair().await;
        peer.write_all(&pattern(300, 5)).unwrap();
        let s = RingStream::open(&ring, tcp).map_err(|_| ()).unwrap();
        let mut s = s;
        s.ready().await;
        assert_eq!(ring.slots_in_use(), 1);
        drop(s);
        // The cancellation's completion frees the slot: turn until it did.
        for _ in 0..1000 {
            if ring.slots_in_use() == 0 {
                break;
            }
            ring.turn();
        }
        let free = ring.slots_in_use();
        drop(peer);
        // Every buffer came back: a new connection gets all 8 × 64 bytes.
        let (tcp, mut peer) = pair().await;
        let sent = pattern(400, 6);
        peer.write_all(&sent).unwrap();
        drop(peer);
        let mut s = RingStream::open(&ring, tcp).map_err(|_| ()).unwrap();
        let all = read_to_end(&mut s, 1000).await;
        (free, all == sent, ring.counts())
    });
    if let Some((free, ok, counts)) = got {
        assert_eq!(free, 0);
        assert!(ok);
        assert_eq!(counts.starved, 0, "{counts:?}");
    }
}

#[test]
fn split_halves_read_from_the_ring_and_write_on_the_socket() {
    let got = on_ring(16, 256, |ring| async move {
        let (tcp, mut peer) = pair().await;
        let s = crate::transport::plain::Plain::new(tcp, Some(&ring));
        assert!(s.on_ring());
        let (mut r, mut w) = s.split();
        peer.write_all(b"ping").unwrap();
        let (res, got) = r.read_spare(Vec::with_capacity(16)).await;
        assert_eq!(res.unwrap(), 4);
        let (res, _) = w.write_all_of(got).await;
        res.unwrap();
        w.close_write().await;
        let mut back = Vec::new();
        peer.read_to_end(&mut back).unwrap();
        back
    });
    if let Some(back) = got {
        assert_eq!(back, b"ping");
    }
}
