/* The floor for bench/cgi_bench.sh: a CGI that does nothing but answer. */
#include <stdio.h>

int main(void) {
  fputs("Status: 200 OK\r\nContent-Type: text/plain\r\n\r\nok\n", stdout);
  return 0;
}
