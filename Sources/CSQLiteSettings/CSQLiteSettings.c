#include <sqlite3.h>
#include "CSQLiteSettings.h"

int idrecon_sqlite3_disable_memstatus(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
