/* Helpers shared by the files of src/offload (private to the module). */
#ifndef ZC_OFFLOAD_INTERNAL_H
#define ZC_OFFLOAD_INTERNAL_H

#include <stdint.h>

/* "1.50 GiB", "8.00 MiB", "512 B": human sizes for error messages. Returns buf. */
const char *zc__offload_fmt_bytes(char buf[32], uint64_t bytes);

/* Page size of the machine (cached). */
size_t zc__offload_page_size(void);

#endif
