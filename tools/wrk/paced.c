// paced: GET requests at a fixed offered rate, for the latency of the read API *at* a rate
// rather than at saturation (what `wrk` measures: as many requests as the cores answer, so its
// p99 is mostly the queue it builds). Like wrk2, each request has an intended start on a fixed
// schedule (rate per second, spread over the connections) and its latency counts from that
// intended start, so a stall of the server is charged to every request it delayed, not only to
// the ones in flight ("coordinated omission"). One thread, epoll, HTTP/1.1 keep-alive, one
// request in flight per connection. Built by tools/bench.sh with the C compiler at hand.
//
// paced HOST:PORT PATH_PREFIX IDS_FILE RATE SECONDS CONNECTIONS [BEARER_TOKEN]
//   GET PATH_PREFIX<id> for ids drawn at random from IDS_FILE (one per line); the first second
//   warms up and is not counted. Prints one JSON object.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { BUCKETS = 2000000 };  // one per microsecond up to 2 s; slower answers go to `over`

typedef struct {
    int fd;
    int busy;
    int64_t intended;   // ns, CLOCK_MONOTONIC
    char buf[65536];
    size_t used;
} Conn;

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "paced: %s: %s\n", what, strerror(errno));
    exit(2);
}

static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint64_t next_random(void) {  // xorshift64*
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return rng * 2685821657736338717u;
}

static uint32_t *histogram;
static uint64_t counted, over, non2xx, errors;
static int64_t worst;

static void record(int64_t latency_ns) {
    int64_t us = latency_ns / 1000;
    if (latency_ns > worst) worst = latency_ns;
    if (us >= BUCKETS) over++; else histogram[us]++;
    counted++;
}

static double percentile_ms(double p) {
    uint64_t rank = (uint64_t)(p * (double)counted), seen = 0;
    if (rank >= counted) rank = counted ? counted - 1 : 0;
    for (int i = 0; i < BUCKETS; i++) {
        seen += histogram[i];
        if (seen > rank) return (i + 1) / 1000.0;  // the bucket's upper end: never flattering
    }
    return worst / 1e6;
}

static int connect_to(struct sockaddr_in *address) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("socket");
    if (connect(fd, (struct sockaddr *)address, sizeof *address) < 0) die("connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

// A complete response's length in c->buf, 0 while incomplete, -1 when it cannot be read.
static long response_length(Conn *c, int *status) {
    char *end = memmem(c->buf, c->used, "\r\n\r\n", 4);
    if (!end) return c->used == sizeof c->buf ? -1 : 0;
    size_t head = (size_t)(end - c->buf) + 4;
    if (c->used < 12 || memcmp(c->buf, "HTTP/1.1 ", 9) != 0) return -1;
    *status = atoi(c->buf + 9);
    long body = -1;
    for (char *line = memchr(c->buf, '\n', head); line && line < end; line = memchr(line + 1, '\n', end - line)) {
        if (strncasecmp(line + 1, "content-length:", 15) == 0) body = strtol(line + 16, NULL, 10);
    }
    if (body < 0) return -1;  // chunked or unknown: not what the API sends
    return c->used >= head + (size_t)body ? (long)(head + body) : 0;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: paced HOST:PORT PATH_PREFIX IDS_FILE RATE SECONDS CONNECTIONS [BEARER_TOKEN]\n");
        return 2;
    }
    char host[64];
    snprintf(host, sizeof host, "%s", argv[1]);
    char *colon = strrchr(host, ':');
    if (!colon) { fprintf(stderr, "paced: HOST:PORT expected\n"); return 2; }
    *colon = 0;
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &address.sin_addr) != 1) {
        fprintf(stderr, "paced: an IPv4 host expected\n");
        return 2;
    }
    const char *prefix = argv[2];
    double rate = atof(argv[4]), seconds = atof(argv[5]);
    int connections = atoi(argv[6]);
    const char *token = argc > 7 ? argv[7] : NULL;
    if (rate <= 0 || seconds <= 0 || connections <= 0) {
        fprintf(stderr, "paced: positive numbers expected\n");
        return 2;
    }

    FILE *f = fopen(argv[3], "r");
    if (!f) die(argv[3]);
    size_t count = 0, capacity = 1024;
    char **ids = malloc(capacity * sizeof *ids);
    char line[256];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!*line) continue;
        if (count == capacity) ids = realloc(ids, (capacity *= 2) * sizeof *ids);
        ids[count++] = strdup(line);
    }
    fclose(f);
    if (!count) { fprintf(stderr, "paced: no ids in %s\n", argv[3]); return 2; }
    histogram = calloc(BUCKETS, sizeof *histogram);
    rng ^= (uint64_t)now_ns();

    int epoll = epoll_create1(0);
    if (epoll < 0) die("epoll_create1");
    Conn *conns = calloc((size_t)connections, sizeof *conns);
    int *idle = malloc((size_t)connections * sizeof *idle), idle_count = 0;
    for (int i = 0; i < connections; i++) {
        conns[i].fd = connect_to(&address);
        struct epoll_event event = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(epoll, EPOLL_CTL_ADD, conns[i].fd, &event) < 0) die("epoll_ctl");
        idle[idle_count++] = i;
    }

    const double interval = 1e9 / rate;
    const int64_t start = now_ns(), warm = start + 1000000000, stop = warm + (int64_t)(seconds * 1e9);
    uint64_t slot = 0, sent = 0, completed_in_window = 0;
    int64_t most_behind = 0;
    char request[512];
    struct epoll_event events[256];
    for (;;) {
        int64_t now = now_ns();
        // Every slot that is due goes out on an idle connection; with none idle it waits, and its
        // latency still counts from its slot.
        for (;;) {
            int64_t due = start + (int64_t)((double)slot * interval);
            if (due > now || due >= stop || idle_count == 0) break;
            Conn *c = &conns[idle[--idle_count]];
            const char *id = ids[next_random() % count];
            int n = token ? snprintf(request, sizeof request, "GET %s%s HTTP/1.1\r\nHost: %s\r\n"
                                     "Authorization: Bearer %s\r\n\r\n", prefix, id, argv[1], token)
                          : snprintf(request, sizeof request, "GET %s%s HTTP/1.1\r\nHost: %s\r\n\r\n",
                                     prefix, id, argv[1]);
            if (n <= 0 || n >= (int)sizeof request) { fprintf(stderr, "paced: request too long\n"); return 2; }
            if (write(c->fd, request, (size_t)n) != n) die("write");
            c->busy = 1;
            c->intended = due;
            c->used = 0;
            if (now - due > most_behind) most_behind = now - due;
            slot++;
            sent++;
        }
        int64_t due = start + (int64_t)((double)slot * interval);
        if (due >= stop && idle_count == connections) break;
        if (now > stop + 2000000000LL) break;  // answers still missing 2 s after the end: counted as errors
        struct timespec wait = {0, 0}, *timeout = NULL;
        int64_t until = due < stop && idle_count > 0 ? due : stop + 2000000000LL;
        if (until > now) { wait.tv_sec = (until - now) / 1000000000; wait.tv_nsec = (until - now) % 1000000000; }
        timeout = &wait;
        int ready = epoll_pwait2(epoll, events, 256, timeout, NULL);
        if (ready < 0) { if (errno == EINTR) continue; die("epoll_pwait2"); }
        int64_t arrived = now_ns();
        for (int e = 0; e < ready; e++) {
            int i = (int)events[e].data.u32;
            Conn *c = &conns[i];
            ssize_t got = read(c->fd, c->buf + c->used, sizeof c->buf - c->used);
            if (got <= 0) {
                if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                fprintf(stderr, "paced: a connection closed by the server\n");
                errors++;
                epoll_ctl(epoll, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                c->fd = connect_to(&address);
                struct epoll_event event = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
                if (epoll_ctl(epoll, EPOLL_CTL_ADD, c->fd, &event) < 0) die("epoll_ctl");
                if (c->busy) { c->busy = 0; idle[idle_count++] = i; }
                continue;
            }
            c->used += (size_t)got;
            int status = 0;
            long length = response_length(c, &status);
            if (length == 0) continue;
            if (length < 0 || (size_t)length != c->used || !c->busy) {
                fprintf(stderr, "paced: a response paced cannot read\n");
                return 2;
            }
            if (c->intended >= warm) {
                record(arrived - c->intended);
                completed_in_window++;
                if (status < 200 || status > 299) non2xx++;
            }
            c->busy = 0;
            idle[idle_count++] = i;
        }
    }
    for (int i = 0; i < connections; i++) if (conns[i].busy) errors++;
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double cpu = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec
        + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    printf("{\"offered_per_second\": %.0f, \"seconds\": %.3f, \"sent\": %llu, \"answered\": %llu, "
           "\"answered_per_second\": %.1f, \"non_2xx\": %llu, \"errors\": %llu, \"over_2s\": %llu, "
           "\"p50_ms\": %.3f, \"p90_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, \"max_ms\": %.3f, "
           "\"most_behind_ms\": %.3f, \"cpu_seconds\": %.3f}\n",
           rate, seconds, (unsigned long long)sent, (unsigned long long)completed_in_window,
           completed_in_window / seconds, (unsigned long long)non2xx, (unsigned long long)errors,
           (unsigned long long)over, percentile_ms(0.50), percentile_ms(0.90), percentile_ms(0.99),
           percentile_ms(0.999), worst / 1e6, most_behind / 1e6, cpu);
    return 0;
}
