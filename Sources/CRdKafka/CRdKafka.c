// librdkafka, loaded with dlopen the first time the Kafka layer calls it. Linked as a library, it
// and the libraries it needs (libssl, libcrypto, libsasl2, libzstd, liblz4, libz) were loaded and
// relocated by every process: 2.2 ms of CPU before `main` (a C program that only links them, against
// one that links SQLite alone), an eighth of a query's whole process. Each function of the API the
// Kafka layer uses is defined here with the header's prototype (the compiler checks it against
// the declaration) and forwards to librdkafka's, resolved once for all. Hidden: librdkafka's own
// calls never bind to these.
#include "CRdKafka.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#pragma GCC visibility push(hidden)

// The API the Kafka layer calls, once: the table of its addresses and their lookups are made from it.
#define RDKAFKA_FUNCTIONS(X) \
    X(rd_kafka_assign) \
    X(rd_kafka_clusterid) \
    X(rd_kafka_commit) \
    X(rd_kafka_conf_destroy) \
    X(rd_kafka_conf_new) \
    X(rd_kafka_conf_set) \
    X(rd_kafka_conf_set_dr_msg_cb) \
    X(rd_kafka_conf_set_error_cb) \
    X(rd_kafka_conf_set_log_cb) \
    X(rd_kafka_conf_set_opaque) \
    X(rd_kafka_conf_set_rebalance_cb) \
    X(rd_kafka_consume) \
    X(rd_kafka_consume_start) \
    X(rd_kafka_consume_stop) \
    X(rd_kafka_consumer_close) \
    X(rd_kafka_consumer_close_queue) \
    X(rd_kafka_consumer_closed) \
    X(rd_kafka_consumer_poll) \
    X(rd_kafka_destroy) \
    X(rd_kafka_destroy_flags) \
    X(rd_kafka_err2name) \
    X(rd_kafka_err2str) \
    X(rd_kafka_error_destroy) \
    X(rd_kafka_error_string) \
    X(rd_kafka_event_destroy) \
    X(rd_kafka_event_error) \
    X(rd_kafka_event_topic_partition_list) \
    X(rd_kafka_event_type) \
    X(rd_kafka_flush) \
    X(rd_kafka_get_watermark_offsets) \
    X(rd_kafka_last_error) \
    X(rd_kafka_mem_free) \
    X(rd_kafka_message_destroy) \
    X(rd_kafka_metadata) \
    X(rd_kafka_metadata_destroy) \
    X(rd_kafka_mock_broker_set_down) \
    X(rd_kafka_mock_broker_set_up) \
    X(rd_kafka_mock_cluster_bootstraps) \
    X(rd_kafka_mock_cluster_destroy) \
    X(rd_kafka_mock_cluster_new) \
    X(rd_kafka_mock_partition_set_leader) \
    X(rd_kafka_mock_push_request_errors_array) \
    X(rd_kafka_mock_topic_create) \
    X(rd_kafka_new) \
    X(rd_kafka_poll) \
    X(rd_kafka_poll_set_consumer) \
    X(rd_kafka_produce) \
    X(rd_kafka_query_watermark_offsets) \
    X(rd_kafka_queue_destroy) \
    X(rd_kafka_queue_new) \
    X(rd_kafka_queue_poll) \
    X(rd_kafka_subscribe) \
    X(rd_kafka_topic_destroy) \
    X(rd_kafka_topic_name) \
    X(rd_kafka_topic_new) \
    X(rd_kafka_topic_partition_list_add) \
    X(rd_kafka_topic_partition_list_destroy) \
    X(rd_kafka_topic_partition_list_new)

#define FIELD(name) __typeof__(name) *name;
static struct {
    RDKAFKA_FUNCTIONS(FIELD)
} table;
#undef FIELD
static const char *failure;
static char failureText[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
    void *library = dlopen("librdkafka.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        snprintf(failureText, sizeof failureText, "cannot load librdkafka.so.1 (%s); install librdkafka1", dlerror());
        failure = failureText;
        return;
    }
#define RESOLVE(name) \
    if (!(table.name = (__typeof__(name) *)dlsym(library, #name))) { \
        snprintf(failureText, sizeof failureText, \
                 "librdkafka.so.1 has no " #name "; install librdkafka1 2.0 or later"); \
        failure = failureText; \
        return; \
    }
    RDKAFKA_FUNCTIONS(RESOLVE)
#undef RESOLVE
}

const char *idrecon_rdkafka_load_error(void) {
    pthread_once(&once, load);
    return failure;
}

// The Kafka layer checks `idrecon_rdkafka_load_error` before its first call; a call without it, on
// a machine without the library, ends the process with that one line instead of a crash.
static inline __typeof__(table) *functions(void) {
    const char *error = idrecon_rdkafka_load_error();
    if (error) {
        fprintf(stderr, "idrecon: %s\n", error);
        exit(2);
    }
    return &table;
}

rd_kafka_resp_err_t rd_kafka_assign(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *partitions) {
    return functions()->rd_kafka_assign(rk, partitions);
}

char * rd_kafka_clusterid(rd_kafka_t *rk, int timeout_ms) {
    return functions()->rd_kafka_clusterid(rk, timeout_ms);
}

rd_kafka_resp_err_t rd_kafka_commit(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *offsets, int async) {
    return functions()->rd_kafka_commit(rk, offsets, async);
}

void rd_kafka_conf_destroy(rd_kafka_conf_t *conf) {
    functions()->rd_kafka_conf_destroy(conf);
}

rd_kafka_conf_t * rd_kafka_conf_new(void) {
    return functions()->rd_kafka_conf_new();
}

rd_kafka_conf_res_t rd_kafka_conf_set(
    rd_kafka_conf_t *conf,
    const char *name,
    const char *value,
    char *errstr,
    size_t errstr_size) {
    return functions()->rd_kafka_conf_set(conf, name, value, errstr, errstr_size);
}

void rd_kafka_conf_set_dr_msg_cb(
    rd_kafka_conf_t *conf,
    void (*dr_msg_cb)(rd_kafka_t *rk, const rd_kafka_message_t *rkmessage, void *opaque)) {
    functions()->rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
}

void rd_kafka_conf_set_error_cb(
    rd_kafka_conf_t *conf,
    void (*error_cb)(rd_kafka_t *rk, int err, const char *reason, void *opaque)) {
    functions()->rd_kafka_conf_set_error_cb(conf, error_cb);
}

void rd_kafka_conf_set_log_cb(
    rd_kafka_conf_t *conf,
    void (*log_cb)(const rd_kafka_t *rk, int level, const char *fac, const char *buf)) {
    functions()->rd_kafka_conf_set_log_cb(conf, log_cb);
}

void rd_kafka_conf_set_opaque(rd_kafka_conf_t *conf, void *opaque) {
    functions()->rd_kafka_conf_set_opaque(conf, opaque);
}

void rd_kafka_conf_set_rebalance_cb(
    rd_kafka_conf_t *conf,
    void (*rebalance_cb)(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *partitions,
                         void *opaque)) {
    functions()->rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
}

rd_kafka_message_t * rd_kafka_consume(rd_kafka_topic_t *rkt, int32_t partition, int timeout_ms) {
    return functions()->rd_kafka_consume(rkt, partition, timeout_ms);
}

int rd_kafka_consume_start(rd_kafka_topic_t *rkt, int32_t partition, int64_t offset) {
    return functions()->rd_kafka_consume_start(rkt, partition, offset);
}

int rd_kafka_consume_stop(rd_kafka_topic_t *rkt, int32_t partition) {
    return functions()->rd_kafka_consume_stop(rkt, partition);
}

rd_kafka_resp_err_t rd_kafka_consumer_close(rd_kafka_t *rk) {
    return functions()->rd_kafka_consumer_close(rk);
}

rd_kafka_error_t * rd_kafka_consumer_close_queue(rd_kafka_t *rk, rd_kafka_queue_t *rkqu) {
    return functions()->rd_kafka_consumer_close_queue(rk, rkqu);
}

int rd_kafka_consumer_closed(rd_kafka_t *rk) {
    return functions()->rd_kafka_consumer_closed(rk);
}

rd_kafka_message_t * rd_kafka_consumer_poll(rd_kafka_t *rk, int timeout_ms) {
    return functions()->rd_kafka_consumer_poll(rk, timeout_ms);
}

void rd_kafka_destroy(rd_kafka_t *rk) {
    functions()->rd_kafka_destroy(rk);
}

void rd_kafka_destroy_flags(rd_kafka_t *rk, int flags) {
    functions()->rd_kafka_destroy_flags(rk, flags);
}

const char * rd_kafka_err2name(rd_kafka_resp_err_t err) {
    return functions()->rd_kafka_err2name(err);
}

const char * rd_kafka_err2str(rd_kafka_resp_err_t err) {
    return functions()->rd_kafka_err2str(err);
}

void rd_kafka_error_destroy(rd_kafka_error_t *error) {
    functions()->rd_kafka_error_destroy(error);
}

const char * rd_kafka_error_string(const rd_kafka_error_t *error) {
    return functions()->rd_kafka_error_string(error);
}

void rd_kafka_event_destroy(rd_kafka_event_t *rkev) {
    functions()->rd_kafka_event_destroy(rkev);
}

rd_kafka_resp_err_t rd_kafka_event_error(rd_kafka_event_t *rkev) {
    return functions()->rd_kafka_event_error(rkev);
}

rd_kafka_topic_partition_list_t * rd_kafka_event_topic_partition_list(rd_kafka_event_t *rkev) {
    return functions()->rd_kafka_event_topic_partition_list(rkev);
}

rd_kafka_event_type_t rd_kafka_event_type(const rd_kafka_event_t *rkev) {
    return functions()->rd_kafka_event_type(rkev);
}

rd_kafka_resp_err_t rd_kafka_flush(rd_kafka_t *rk, int timeout_ms) {
    return functions()->rd_kafka_flush(rk, timeout_ms);
}

rd_kafka_resp_err_t rd_kafka_get_watermark_offsets(
    rd_kafka_t *rk,
    const char *topic,
    int32_t partition,
    int64_t *low,
    int64_t *high) {
    return functions()->rd_kafka_get_watermark_offsets(rk, topic, partition, low, high);
}

rd_kafka_resp_err_t rd_kafka_last_error(void) {
    return functions()->rd_kafka_last_error();
}

void rd_kafka_mem_free(rd_kafka_t *rk, void *ptr) {
    functions()->rd_kafka_mem_free(rk, ptr);
}

void rd_kafka_message_destroy(rd_kafka_message_t *rkmessage) {
    functions()->rd_kafka_message_destroy(rkmessage);
}

rd_kafka_resp_err_t rd_kafka_metadata(
    rd_kafka_t *rk,
    int all_topics,
    rd_kafka_topic_t *only_rkt,
    const struct rd_kafka_metadata **metadatap,
    int timeout_ms) {
    return functions()->rd_kafka_metadata(rk, all_topics, only_rkt, metadatap, timeout_ms);
}

void rd_kafka_metadata_destroy(const struct rd_kafka_metadata *metadata) {
    functions()->rd_kafka_metadata_destroy(metadata);
}

rd_kafka_resp_err_t rd_kafka_mock_broker_set_down(rd_kafka_mock_cluster_t *mcluster, int32_t broker_id) {
    return functions()->rd_kafka_mock_broker_set_down(mcluster, broker_id);
}

rd_kafka_resp_err_t rd_kafka_mock_broker_set_up(rd_kafka_mock_cluster_t *mcluster, int32_t broker_id) {
    return functions()->rd_kafka_mock_broker_set_up(mcluster, broker_id);
}

const char * rd_kafka_mock_cluster_bootstraps(const rd_kafka_mock_cluster_t *mcluster) {
    return functions()->rd_kafka_mock_cluster_bootstraps(mcluster);
}

void rd_kafka_mock_cluster_destroy(rd_kafka_mock_cluster_t *mcluster) {
    functions()->rd_kafka_mock_cluster_destroy(mcluster);
}

rd_kafka_mock_cluster_t * rd_kafka_mock_cluster_new(rd_kafka_t *rk, int broker_cnt) {
    return functions()->rd_kafka_mock_cluster_new(rk, broker_cnt);
}

rd_kafka_resp_err_t rd_kafka_mock_partition_set_leader(
    rd_kafka_mock_cluster_t *mcluster,
    const char *topic,
    int32_t partition,
    int32_t broker_id) {
    return functions()->rd_kafka_mock_partition_set_leader(mcluster, topic, partition, broker_id);
}

void rd_kafka_mock_push_request_errors_array(
    rd_kafka_mock_cluster_t *mcluster,
    int16_t ApiKey,
    size_t cnt,
    const rd_kafka_resp_err_t *errors) {
    functions()->rd_kafka_mock_push_request_errors_array(mcluster, ApiKey, cnt, errors);
}

rd_kafka_resp_err_t rd_kafka_mock_topic_create(
    rd_kafka_mock_cluster_t *mcluster,
    const char *topic,
    int partition_cnt,
    int replication_factor) {
    return functions()->rd_kafka_mock_topic_create(mcluster, topic, partition_cnt, replication_factor);
}

rd_kafka_t * rd_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *errstr, size_t errstr_size) {
    return functions()->rd_kafka_new(type, conf, errstr, errstr_size);
}

int rd_kafka_poll(rd_kafka_t *rk, int timeout_ms) {
    return functions()->rd_kafka_poll(rk, timeout_ms);
}

rd_kafka_resp_err_t rd_kafka_poll_set_consumer(rd_kafka_t *rk) {
    return functions()->rd_kafka_poll_set_consumer(rk);
}

int rd_kafka_produce(
    rd_kafka_topic_t *rkt,
    int32_t partition,
    int msgflags,
    void *payload,
    size_t len,
    const void *key,
    size_t keylen,
    void *msg_opaque) {
    return functions()->rd_kafka_produce(rkt, partition, msgflags, payload, len, key, keylen, msg_opaque);
}

rd_kafka_resp_err_t rd_kafka_query_watermark_offsets(
    rd_kafka_t *rk,
    const char *topic,
    int32_t partition,
    int64_t *low,
    int64_t *high,
    int timeout_ms) {
    return functions()->rd_kafka_query_watermark_offsets(rk, topic, partition, low, high, timeout_ms);
}

void rd_kafka_queue_destroy(rd_kafka_queue_t *rkqu) {
    functions()->rd_kafka_queue_destroy(rkqu);
}

rd_kafka_queue_t * rd_kafka_queue_new(rd_kafka_t *rk) {
    return functions()->rd_kafka_queue_new(rk);
}

rd_kafka_event_t * rd_kafka_queue_poll(rd_kafka_queue_t *rkqu, int timeout_ms) {
    return functions()->rd_kafka_queue_poll(rkqu, timeout_ms);
}

rd_kafka_resp_err_t rd_kafka_subscribe(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *topics) {
    return functions()->rd_kafka_subscribe(rk, topics);
}

void rd_kafka_topic_destroy(rd_kafka_topic_t *rkt) {
    functions()->rd_kafka_topic_destroy(rkt);
}

const char * rd_kafka_topic_name(const rd_kafka_topic_t *rkt) {
    return functions()->rd_kafka_topic_name(rkt);
}

rd_kafka_topic_t * rd_kafka_topic_new(rd_kafka_t *rk, const char *topic, rd_kafka_topic_conf_t *conf) {
    return functions()->rd_kafka_topic_new(rk, topic, conf);
}

rd_kafka_topic_partition_t * rd_kafka_topic_partition_list_add(
    rd_kafka_topic_partition_list_t *rktparlist,
    const char *topic,
    int32_t partition) {
    return functions()->rd_kafka_topic_partition_list_add(rktparlist, topic, partition);
}

void rd_kafka_topic_partition_list_destroy(rd_kafka_topic_partition_list_t *rkparlist) {
    functions()->rd_kafka_topic_partition_list_destroy(rkparlist);
}

rd_kafka_topic_partition_list_t * rd_kafka_topic_partition_list_new(int size) {
    return functions()->rd_kafka_topic_partition_list_new(size);
}

#pragma GCC visibility pop
