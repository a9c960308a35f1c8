/* nfq_delay: holds every packet of an NFQUEUE for a fixed delay, then lets
 * it go, in order. The fault matrix uses it where the kernel has no netem
 * qdisc: with an iptables rule that sends a link's packets to the queue it
 * makes the link slow (and iptables' statistic match makes it lossy).
 *
 *   nfq_delay QUEUE DELAY_MS LIMIT_S
 *
 * Runs in the network namespace whose rule feeds QUEUE; stops by itself
 * after LIMIT_S seconds (and on SIGTERM), letting every held packet go. */
#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#define MAX_HELD 65536

struct held {
  uint32_t id;
  double due;
};

static struct held ring[MAX_HELD];
static size_t head, count;
static double delay_s;
static volatile sig_atomic_t stop;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void on_term(int sig) {
  (void)sig;
  stop = 1;
}

static int on_packet(struct nfq_q_handle* q, struct nfgenmsg* msg, struct nfq_data* nfa,
                     void* data) {
  (void)msg;
  (void)data;
  struct nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (ph == NULL) return 0;
  uint32_t id = ntohl(ph->packet_id);
  if (count == MAX_HELD) return nfq_set_verdict(q, id, NF_ACCEPT, 0, NULL); /* full: no delay */
  ring[(head + count) % MAX_HELD] = (struct held){id, now_s() + delay_s};
  ++count;
  return 0;
}

static void release(struct nfq_q_handle* q, double until) {
  while (count > 0 && ring[head].due <= until) {
    nfq_set_verdict(q, ring[head].id, NF_ACCEPT, 0, NULL);
    head = (head + 1) % MAX_HELD;
    --count;
  }
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s QUEUE DELAY_MS LIMIT_S\n", argv[0]);
    return 2;
  }
  const int queue = atoi(argv[1]);
  delay_s = atof(argv[2]) / 1000.0;
  const double end = now_s() + atof(argv[3]);
  signal(SIGTERM, on_term);
  signal(SIGINT, on_term);

  struct nfq_handle* h = nfq_open();
  if (h == NULL) {
    perror("nfq_open");
    return 1;
  }
  struct nfq_q_handle* q = nfq_create_queue(h, (uint16_t)queue, &on_packet, NULL);
  if (q == NULL) {
    perror("nfq_create_queue");
    return 1;
  }
  if (nfq_set_mode(q, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(q, MAX_HELD) < 0) {
    perror("nfq_set_mode");
    return 1;
  }
  const int fd = nfq_fd(h);
  int rcvbuf = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  printf("nfq_delay: queue %d, %.0f ms\n", queue, delay_s * 1000.0);
  fflush(stdout);
  char buf[65536];
  while (!stop && now_s() < end) {
    const double t = now_s();
    release(q, t);
    int timeout_ms = 100;
    if (count > 0) {
      double wait = (ring[head].due - t) * 1000.0;
      timeout_ms = wait < 0 ? 0 : (int)wait + 1;
      if (timeout_ms > 100) timeout_ms = 100;
    }
    struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, timeout_ms) > 0) {
      ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0)
        nfq_handle_packet(h, buf, (int)n);
      else if (n < 0 && errno == ENOBUFS)
        fprintf(stderr, "nfq_delay: queue overrun\n");
    }
  }
  release(q, 1e300);
  nfq_destroy_queue(q);
  nfq_close(h);
  return 0;
}
