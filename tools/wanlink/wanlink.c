/*
 * wanlink: a delay line for a WAN link emulator, for kernels without sch_netem.
 *
 * iptables hands packets to NFQUEUE queue N (`-j NFQUEUE --queue-num N --queue-bypass`);
 * this program binds that queue, notes when each packet arrived, and gives the kernel an
 * NF_ACCEPT verdict for it once `--delay` (+ jitter) milliseconds have passed, or drops it at
 * random with probability `--loss` percent. The rate cap is not done here: `tc tbf` caps (see
 * Sources/MeshTestKit/WANLink.swift and bench/wan-link-check.sh).
 *
 *   wanlink --queue N --delay MS [--jitter MS] [--loss PCT] [--segment] [--max-seconds S] [--seed N] [--nice N]
 *
 * Where to hang the rules: where packets have already left their sender, e.g. in the namespace
 * of a bridge that joins the hosts (PREROUTING with `-m physdev --physdev-in PORT` for what a
 * host sends, POSTROUTING with `--physdev-out PORT` for what it receives), as
 * Sources/MeshTestKit/WANLink.swift does. Not in the sender's own OUTPUT chain: a packet held
 * there still counts against its socket (send buffer, TCP small queues), and a TCP upload through
 * 50 ms crawled at 0.25 MB/s that way.
 *
 * Why loss is here and not in `iptables -m statistic ... -j DROP`: a DROP in OUTPUT makes the
 * sender's sendmsg() fail with EPERM, which no real link does (a UDP sender sees errors, iperf3
 * stops). A packet handed to the queue has already left its sender, so an NF_DROP verdict is as
 * silent as a lost packet on a wire. Loss applies to each packet in either direction.
 *
 * Prints `ready` on stdout once the queue is bound (rules added before that let packets pass
 * undelayed through --queue-bypass), and one summary line on stderr when it exits: on SIGTERM,
 * SIGINT or after --max-seconds. On exit every packet still held is accepted at once, so none
 * is lost.
 *
 * Choices, so that the emulator is not itself the bottleneck:
 * - copy mode META: the kernel sends only the packet's metadata (id, hook), never its payload;
 * - NFQA_CFG_F_GSO when there is no loss: a TCP super-packet (up to 64 KiB) is queued whole, not
 *   cut into segments. With --loss the kernel cuts it first, so that loss hits wire-sized packets
 *   one at a time, as on a real link (not up to 45 of them at once). `--segment` cuts them without
 *   loss too: the loss-free twin of a lossy link, whose receiver then reads the same packets;
 * - a queue of 100,000 packets and a 32 MiB socket receive buffer (SO_RCVBUFFORCE, as root);
 *   NFQA_CFG_F_FAIL_OPEN is NOT set: it would let packets through undelayed when the queue is
 *   full, which hides overload instead of showing it as loss;
 * - batch verdicts: packets leave in id order, so one NF_ACCEPT "up to id X" releases every
 *   packet that is due at once (one system call per batch, not per packet);
 * - batch reads: recvmmsg() takes up to 64 queue messages per system call;
 * - one thread, ppoll() with a timeout to the next due packet (nanoseconds, timer slack 1 us);
 * - the inherited priority. The kernel passes each accepted packet on (bridge, veth, the
 *   receiver's stack) inside our verdict call, so on a busy machine verdicts come late: on
 *   this 2-core VM under a 1 Gbit/s TCP flow, 0.2-2 ms on average and up to 150 ms at worst
 *   (packets are late, never early). `--nice -10` made them more punctual (0.2 against 0.65 ms
 *   on average for UDP at 50 ms) but halved what iperf3's UDP got through (the senders and
 *   receivers lost the CPU), so it is not the default.
 *
 * Order: packets leave in the order they arrived, in both directions together (one queue serves
 * both directions of a host's link). Without jitter this is exactly a fixed delay. With jitter each
 * packet draws delay + uniform[0, jitter] but never leaves before the packet ahead of it, so
 * there is no reordering; at high packet rates the delays bunch up toward delay + jitter.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <arpa/inet.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libnetfilter_queue/libnetfilter_queue.h>
#include <libnfnetlink/libnfnetlink.h>

#ifndef SOL_NETLINK
#define SOL_NETLINK 270
#endif
#ifndef NETLINK_NO_ENOBUFS
#define NETLINK_NO_ENOBUFS 5
#endif

enum {
    QUEUE_MAXLEN = 100000,            /* packets the kernel may hold for us */
    RING_CAPACITY = 1 << 17,          /* > QUEUE_MAXLEN, a power of two */
    RECEIVE_BUFFER = 32 << 20,        /* bytes of netlink messages not read yet */
    BATCH = 64,                       /* messages per recvmmsg() call */
    BATCHES_PER_ROUND = 8,            /* calls before due packets are looked at again */
    MESSAGE_BYTES = 4096,             /* one message is ~100 bytes in META mode (no payload) */
};

/* One held packet: its id in the queue and when it is due (CLOCK_MONOTONIC, ns). */
struct held {
    uint32_t id;
    uint64_t due;
};

/* Everything the loop needs; one instance, in main. */
struct link_state {
    struct nfq_q_handle *queue;
    uint64_t delay_ns, jitter_ns;
    uint64_t loss_threshold;           /* drop when a 64-bit random draw is below it; 0: never */
    uint64_t rng;                      /* xorshift64* state, for jitter and loss */
    struct held ring[RING_CAPACITY];   /* FIFO of held packets, in id order */
    size_t head, count;
    uint64_t last_due;                 /* due time of the newest packet: nobody leaves earlier */
    /* Figures for the summary line. */
    uint64_t packets, per_hook[NF_INET_NUMHOOKS], dropped, verdict_calls, ring_full;
    size_t max_held;
    uint64_t max_late_ns, total_late_ns; /* time between "due" and the verdict: worst, sum */
    uint64_t released;
};

static volatile sig_atomic_t stop_requested;

static void on_signal(int signo) { (void)signo; stop_requested = 1; }

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t next_random(struct link_state *s) {
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return s->rng * 0x2545F4914F6CDD1DULL;
}

/* Milliseconds (may have a fraction) from the command line, or exit with a usage error. */
static uint64_t parse_ms(const char *name, const char *text) {
    char *end = NULL;
    errno = 0;
    double ms = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(ms >= 0) || ms > 3600000) {
        fprintf(stderr, "wanlink: %s wants milliseconds between 0 and 3600000, got '%s'\n", name, text);
        exit(2);
    }
    return (uint64_t)(ms * 1e6);
}

static long parse_integer(const char *name, const char *text, long min, long max) {
    char *end = NULL;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < min || value > max) {
        fprintf(stderr, "wanlink: %s wants a whole number between %ld and %ld, got '%s'\n", name, min, max, text);
        exit(2);
    }
    return value;
}

/* Accept every packet up to and including `id` (all of them are due or we are exiting). */
static void accept_up_to(struct link_state *s, uint32_t id) {
    if (nfq_set_verdict_batch(s->queue, id, NF_ACCEPT) < 0)
        fprintf(stderr, "wanlink: verdict for packets up to id %" PRIu32 " failed: %s\n", id, strerror(errno));
    s->verdict_calls++;
}

/* Called by nfq_handle_packet for each queued packet: note it with its due time. */
static int on_packet(struct nfq_q_handle *queue, struct nfgenmsg *message, struct nfq_data *data, void *context) {
    (void)message;
    struct link_state *s = context;
    struct nfqnl_msg_packet_hdr *header = nfq_get_msg_packet_hdr(data);
    if (header == NULL) return 0;
    uint32_t id = ntohl(header->packet_id);
    s->packets++;
    if (header->hook < NF_INET_NUMHOOKS) s->per_hook[header->hook]++;

    if (s->loss_threshold != 0 && next_random(s) < s->loss_threshold) {
        /* Lost on the wire. Its id is covered by a later batch ACCEPT too, which skips it: the
         * kernel applies a batch verdict only to packets it still holds. */
        s->dropped++;
        nfq_set_verdict(queue, id, NF_DROP, 0, NULL);
        return 0;
    }

    if (s->count == RING_CAPACITY) {
        /* Cannot happen while the kernel holds at most QUEUE_MAXLEN; pass it on rather than lose it. */
        s->ring_full++;
        nfq_set_verdict(queue, id, NF_ACCEPT, 0, NULL);
        return 0;
    }
    uint64_t due = now_ns() + s->delay_ns;
    if (s->jitter_ns > 0) due += next_random(s) % (s->jitter_ns + 1);
    if (due < s->last_due) due = s->last_due;     /* FIFO: never before the packet ahead */
    s->last_due = due;
    s->ring[(s->head + s->count) % RING_CAPACITY] = (struct held){ .id = id, .due = due };
    s->count++;
    if (s->count > s->max_held) s->max_held = s->count;
    return 0;
}

/* Release every packet whose time has come, with one batch verdict; returns the next due time
 * (0 when nothing is held). */
static uint64_t release_due(struct link_state *s, uint64_t now) {
    uint32_t last_id = 0;
    int any = 0;
    while (s->count > 0 && s->ring[s->head].due <= now) {
        struct held *h = &s->ring[s->head];
        uint64_t late = now - h->due;
        if (late > s->max_late_ns) s->max_late_ns = late;
        s->total_late_ns += late;
        s->released++;
        last_id = h->id;
        any = 1;
        s->head = (s->head + 1) % RING_CAPACITY;
        s->count--;
    }
    if (any) accept_up_to(s, last_id);
    return s->count > 0 ? s->ring[s->head].due : 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: wanlink --queue N --delay MS [--jitter MS] [--loss PCT] [--segment] [--max-seconds S] [--seed N] [--nice N]\n"
            "  holds each packet of NFQUEUE queue N for MS (+ uniform 0..jitter) milliseconds, in order,\n"
            "  and drops PCT percent of them at random; --segment (implied by any loss) cuts GSO\n"
            "  packets into wire-sized ones first\n");
}

int main(int argc, char **argv) {
    static struct link_state s;        /* large (the ring): not on the stack */
    long queue_number = -1, max_seconds = 0, niceness = 0;
    int set_niceness = 0, segment = 0;
    s.rng = 0x9E3779B97F4A7C15ULL;
    static const struct option options[] = {
        { "queue", required_argument, NULL, 'q' },
        { "delay", required_argument, NULL, 'd' },
        { "jitter", required_argument, NULL, 'j' },
        { "loss", required_argument, NULL, 'l' },
        { "max-seconds", required_argument, NULL, 'm' },
        { "seed", required_argument, NULL, 's' },
        { "nice", required_argument, NULL, 'n' },
        { "segment", no_argument, NULL, 'g' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int option;
    while ((option = getopt_long(argc, argv, "q:d:j:l:m:s:n:gh", options, NULL)) != -1) {
        switch (option) {
        case 'q': queue_number = parse_integer("--queue", optarg, 0, 65535); break;
        case 'd': s.delay_ns = parse_ms("--delay", optarg); break;
        case 'j': s.jitter_ns = parse_ms("--jitter", optarg); break;
        case 'l': {
            char *end = NULL;
            double percent = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(percent >= 0 && percent <= 100)) {
                fprintf(stderr, "wanlink: --loss wants a percentage between 0 and 100, got '%s'\n", optarg);
                return 2;
            }
            s.loss_threshold = percent >= 100 ? UINT64_MAX : (uint64_t)(percent / 100 * 18446744073709551616.0);
            break;
        }
        case 'm': max_seconds = parse_integer("--max-seconds", optarg, 0, 7 * 24 * 3600); break;
        case 's': s.rng = (uint64_t)parse_integer("--seed", optarg, 0, LONG_MAX) * 2 + 1; break;
        case 'n': niceness = parse_integer("--nice", optarg, -20, 19); set_niceness = 1; break;
        case 'g': segment = 1; break;
        case 'h': usage(); return 0;
        default: usage(); return 2;
        }
    }
    if (queue_number < 0 || optind != argc) { usage(); return 2; }

    /* Signals only interrupt ppoll (blocked elsewhere), so a stop is never missed between checks. */
    sigset_t blocked, during_poll;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGINT);
    sigprocmask(SIG_BLOCK, &blocked, &during_poll);
    sigdelset(&during_poll, SIGTERM);
    sigdelset(&during_poll, SIGINT);
    struct sigaction action = { .sa_handler = on_signal };
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    prctl(PR_SET_TIMERSLACK, 1000UL);   /* wake within ~1 us of the due time, not 50 us */
    if (set_niceness && setpriority(PRIO_PROCESS, 0, (int)niceness) < 0)
        fprintf(stderr, "wanlink: cannot set nice %ld (%s); running at the inherited priority\n", niceness, strerror(errno));

    struct nfq_handle *handle = nfq_open();
    if (handle == NULL) {
        fprintf(stderr, "wanlink: cannot open a netfilter queue handle (root? nfnetlink_queue in the kernel?)\n");
        return 1;
    }
    s.queue = nfq_create_queue(handle, (uint16_t)queue_number, on_packet, &s);
    if (s.queue == NULL) {
        fprintf(stderr, "wanlink: cannot bind queue %ld (is another program bound to it?)\n", queue_number);
        nfq_close(handle);
        return 1;
    }
    if (nfq_set_mode(s.queue, NFQNL_COPY_META, 0) < 0)
        fprintf(stderr, "wanlink: copy mode META refused; packets are still delayed\n");
    if (nfq_set_queue_maxlen(s.queue, QUEUE_MAXLEN) < 0)
        fprintf(stderr, "wanlink: queue length %d refused; the kernel default (1024) holds\n", QUEUE_MAXLEN);
    if (s.loss_threshold == 0 && !segment && nfq_set_queue_flags(s.queue, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO) < 0)
        fprintf(stderr, "wanlink: GSO flag refused; large TCP packets are segmented first\n");
    int fd = nfq_fd(handle);
    nfnl_rcvbufsiz(nfq_nfnlh(handle), RECEIVE_BUFFER);
    int one = 1;
    /* An overrun socket drops messages (counted by the kernel); recv must not fail for it. */
    setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);

    printf("ready\n");
    fflush(stdout);

    uint64_t started = now_ns();
    uint64_t deadline = max_seconds > 0 ? started + (uint64_t)max_seconds * 1000000000u : 0;
    /* Buffers for one recvmmsg() batch. */
    static char buffers[BATCH][MESSAGE_BYTES];
    static struct iovec vectors[BATCH];
    static struct mmsghdr messages[BATCH];
    for (int i = 0; i < BATCH; i++) {
        vectors[i] = (struct iovec){ .iov_base = buffers[i], .iov_len = MESSAGE_BYTES };
        messages[i].msg_hdr = (struct msghdr){ .msg_iov = &vectors[i], .msg_iovlen = 1 };
    }
    int exit_code = 0;

    /* The loop: wait until a packet is due, a message arrives, a signal, or the deadline. */
    while (!stop_requested) {
        uint64_t now = now_ns();
        if (deadline != 0 && now >= deadline) break;
        uint64_t next_due = release_due(&s, now);
        uint64_t wake = deadline;
        if (next_due != 0 && (wake == 0 || next_due < wake)) wake = next_due;
        struct timespec timeout, *timeout_pointer = NULL;
        if (wake != 0) {
            uint64_t wait = wake > now ? wake - now : 0;
            timeout.tv_sec = (time_t)(wait / 1000000000u);
            timeout.tv_nsec = (long)(wait % 1000000000u);
            timeout_pointer = &timeout;
        }
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        int ready = ppoll(&pfd, 1, timeout_pointer, &during_poll);
        if (ready < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "wanlink: poll: %s\n", strerror(errno));
            exit_code = 1;
            break;
        }
        if (ready == 0 || !(pfd.revents & POLLIN)) continue;
        /* Read what is there, a batch of messages per call (a bounded number of calls), then
         * look at due packets again. */
        for (int round = 0; round < BATCHES_PER_ROUND; round++) {
            int n = recvmmsg(fd, messages, BATCH, MSG_DONTWAIT, NULL);
            if (n < 0) {
                if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ENOBUFS)
                    fprintf(stderr, "wanlink: recvmmsg: %s\n", strerror(errno));
                break;
            }
            for (int i = 0; i < n; i++)
                nfq_handle_packet(handle, buffers[i], (int)messages[i].msg_len);
            if (n < BATCH) break;
        }
    }

    /* Let every held packet go now (the newest id covers all of them), then unbind. */
    if (s.count > 0)
        accept_up_to(&s, s.ring[(s.head + s.count - 1) % RING_CAPACITY].id);
    nfq_destroy_queue(s.queue);
    nfq_close(handle);
    double seconds = (double)(now_ns() - started) / 1e9;
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    /* Where the packets came from: the hooks the iptables rules hang on. */
    static const char *const hook_names[NF_INET_NUMHOOKS] = { "prerouting", "input", "forward", "output", "postrouting" };
    char hooks[160] = "";
    size_t used = 0;
    for (int hook = 0; hook < NF_INET_NUMHOOKS; hook++) {
        if (s.per_hook[hook] == 0) continue;
        int n = snprintf(hooks + used, sizeof hooks - used, "%s%s %" PRIu64, used ? ", " : "", hook_names[hook], s.per_hook[hook]);
        if (n > 0 && (size_t)n < sizeof hooks - used) used += (size_t)n;
    }
    fprintf(stderr,
            "wanlink: queue %ld, %.1f s: %" PRIu64 " packets (%s), %" PRIu64 " dropped as loss, max held %zu, "
            "%" PRIu64 " verdict calls, verdicts after due: mean %.3f ms, max %.3f ms, "
            "CPU %.2f s user + %.2f s system (system includes passing each packet on)%s\n",
            queue_number, seconds, s.packets, used ? hooks : "none", s.dropped, s.max_held, s.verdict_calls,
            s.released ? (double)s.total_late_ns / (double)s.released / 1e6 : 0.0, (double)s.max_late_ns / 1e6,
            (double)usage.ru_utime.tv_sec + (double)usage.ru_utime.tv_usec / 1e6,
            (double)usage.ru_stime.tv_sec + (double)usage.ru_stime.tv_usec / 1e6,
            s.ring_full > 0 ? " (ring full: some passed undelayed)" : "");
    return exit_code;
}
