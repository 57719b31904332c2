// floor: an HTTP server that does no work, for the floor the machine sets under the read API's
// latency. It answers every request with the same 200 and a body of the size of a GET
// /v1/access answer, from an epoll loop per core (each its own SO_REUSEPORT listener), HTTP/1.1
// keep-alive, pipelined requests answered in order. `make bench` asks it as it asks the API, in
// the same conditions (a consumer ingesting beside it, the load generator on the same cores): a
// p99 this server misses is the machine's, not the API's. Built by tools/bench.sh with the C
// compiler at hand; not part of idrecon.
//
// floor   listens on 127.0.0.1 on a port of the kernel's choosing, prints "http://127.0.0.1:PORT"
//         and serves until killed. Requests are GETs without a body: a request ends at its
//         blank line.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static const char BODY[] =
    "{\"applied_seq\":1498130,\"as_of\":\"now\",\"asid\":\"100000000000001\",\"evidence_device\":null,"
    "\"evidence_event\":null,\"projection_lag_events\":0,\"state\":\"allowed\"}";
static char response[512];
static size_t response_len;
static int port;

enum { BUFFER = 16384, MAX_CONNS = 4096 };

typedef struct {
    int fd;
    size_t used;
    char buf[BUFFER];
} Conn;

static int listener(int at_port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(at_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1024) != 0) return -1;
    return fd;
}

// Writes all of `n` bytes; the answers are small and the client reads them, so a full socket
// buffer is waited out in place rather than queued.
static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) {
            usleep(50);
            continue;
        }
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

// Answers every complete request in the buffer, keeps the partial one; -1 closes the connection.
static int serve(Conn *c) {
    for (;;) {
        ssize_t r = read(c->fd, c->buf + c->used, BUFFER - c->used);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN) return 0;
        if (r <= 0) return -1;
        c->used += (size_t)r;
        size_t start = 0, answers = 0;
        char *end;
        while ((end = memmem(c->buf + start, c->used - start, "\r\n\r\n", 4)) != NULL) {
            start = (size_t)(end - c->buf) + 4;
            answers++;
        }
        if (answers > 0) {
            char out[BUFFER];
            size_t n = 0;
            for (size_t i = 0; i < answers; i++) {
                if (n + response_len > sizeof out) {
                    if (write_all(c->fd, out, n) != 0) return -1;
                    n = 0;
                }
                memcpy(out + n, response, response_len);
                n += response_len;
            }
            if (write_all(c->fd, out, n) != 0) return -1;
        }
        memmove(c->buf, c->buf + start, c->used - start);
        c->used -= start;
        if (c->used == BUFFER) return -1;  // a request longer than the buffer
    }
}

static void *loop(void *arg) {
    int lfd = (int)(long)arg;
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    struct epoll_event events[64];
    for (;;) {
        int n = epoll_wait(ep, events, 64, -1);
        for (int i = 0; i < n; i++) {
            Conn *c = events[i].data.ptr;
            if (c == NULL) {
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    int one = 1;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    Conn *nc = calloc(1, sizeof *nc);
                    if (nc == NULL) {
                        close(fd);
                        continue;
                    }
                    nc->fd = fd;
                    struct epoll_event cev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = nc};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                }
            } else if (serve(c) != 0) {
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                free(c);
            }
        }
    }
    return NULL;
}

int main(void) {
    response_len = (size_t)snprintf(response, sizeof response,
                                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %zu\r\n"
                                    "server: floor\r\n\r\n%s", strlen(BODY), BODY);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    int first = listener(0);
    if (first < 0) {
        perror("floor: listen");
        return 1;
    }
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    getsockname(first, (struct sockaddr *)&a, &len);
    port = ntohs(a.sin_port);
    for (long i = 1; i < cores; i++) {
        int fd = listener(port);
        if (fd < 0) {
            perror("floor: listen");
            return 1;
        }
        pthread_t t;
        pthread_create(&t, NULL, loop, (void *)(long)fd);
    }
    printf("http://127.0.0.1:%d\n", port);
    fflush(stdout);
    loop((void *)(long)first);
    return 0;
}
