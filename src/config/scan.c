/* Counting the values of a JSON text before it is parsed.
 *
 * jansson's tree costs 40 to 130 bytes per value, so a 16 MiB file of tiny
 * values ("[[],[],...]" or {"a":0,...}) would take several hundred MB even
 * though the file is within the size limit. Every value but the root follows
 * a '[', '{' or ',' outside a string, so counting those bounds the number of
 * values; the largest real DeepSpeed config has under a hundred. */
#include "config/internal.h"

size_t zc__cfg_count_values(const char *text, size_t len, size_t stop)
{
    size_t n = 1; /* the root */
    bool in_string = false;
    for (size_t i = 0; i < len && n <= stop; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\')
                i++; /* the escaped character cannot end the string */
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{' || c == ',') {
            n++;
        }
    }
    return n;
}
