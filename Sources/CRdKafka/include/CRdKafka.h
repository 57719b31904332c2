#ifndef IDRECON_CRDKAFKA_H
#define IDRECON_CRDKAFKA_H
// librdkafka's API, loaded when first used (CRdKafka.c): the commands that never touch Kafka
// do not load it, nor the TLS, SASL and compression libraries it brings.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

/// NULL once librdkafka is loaded (loading it if it is not yet), else why it cannot be.
const char *idrecon_rdkafka_load_error(void);
#endif
