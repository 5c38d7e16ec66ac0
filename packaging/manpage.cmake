# Writes the man page tollgate.1.gz from the built binary's help, at build time (the top-level
# CMakeLists.txt runs it when help2man is installed):
#   cmake -DTOLLGATE=build/tollgate -DHELP2MAN=/usr/bin/help2man -DGZIP=/usr/bin/gzip
#         -DVERSION=0.1.0 -DWORK=build/packaging -DOUT=build/packaging/tollgate.1.gz
#         -P packaging/manpage.cmake
# help2man reads `tollgate --help` (NAME, SYNOPSIS, DESCRIPTION, OPTIONS); the subcommands' own
# help (`tollgate serve --help`, ...) and the FILES, SIGNALS and SEE ALSO sections come from an
# include file written here. The version string is the project's, without the git revision, and
# the page is gzipped without name or timestamp (-9n), so that one source gives one page.
foreach(var TOLLGATE HELP2MAN GZIP VERSION WORK OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "manpage.cmake: -D${var}= is required")
  endif()
endforeach()

# Roff-safe text: a backslash as \e, a hyphen as \- (an option's minus, not a hyphen), a line
# starting with . or ' escaped.
function(roff_text in out_var)
  string(REPLACE "\\" "\\e" t "${in}")
  string(REPLACE "-" "\\-" t "${t}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" t "${t}")
  set(${out_var} "${t}" PARENT_SCOPE)
endfunction()

set(include_text "")
string(APPEND include_text "[SUBCOMMANDS]\n")
foreach(sub serve check-config usage)
  execute_process(COMMAND ${TOLLGATE} ${sub} --help
                  OUTPUT_VARIABLE help RESULT_VARIABLE rc ERROR_VARIABLE err TIMEOUT 30)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "manpage.cmake: `tollgate ${sub} --help` failed (${rc}): ${err}")
  endif()
  # CLI11's subcommand help: a description line, then Usage/Positionals/Options, then the
  # application's footer (exit codes, configuration reference), which the page has once.
  string(REGEX REPLACE "\nExit codes:.*$" "" help "${help}")
  string(REGEX REPLACE "\n+$" "" help "${help}")
  string(FIND "${help}" "\n" nl)
  string(SUBSTRING "${help}" 0 ${nl} summary)
  math(EXPR rest_at "${nl} + 1")
  string(SUBSTRING "${help}" ${rest_at} -1 body)
  roff_text("${summary}" summary)
  roff_text("${body}" body)
  string(APPEND include_text ".SS \"tollgate ${sub}\"\n${summary}\n.PP\n.nf\n${body}\n.fi\n")
endforeach()

string(APPEND include_text [=[
[FILES]
.TP
.I /etc/tollgate/tollgate.yaml
The configuration of the packaged service (tollgate.service); validate it with
\fBtollgate check-config\fR and reload it with \fBsystemctl reload tollgate\fR.
.TP
.I /usr/share/tollgate/migrations/
The PostgreSQL schema of the api_keys key source, applied in file name order.
.TP
.I /var/lib/tollgate/
The service's only writable directory: the place for a PostgreSQL key source's snapshot file.
.TP
.I /usr/share/doc/tollgate/
README.md and the reference: configuration.md, operations.md, http-contract.md, ...
[SIGNALS]
.TP
.B SIGHUP
Reload the configuration file; an invalid file is refused and the old configuration keeps
serving.
.TP
.BR SIGTERM ", " SIGINT
Drain: stop accepting, let in-flight requests finish for up to server.drain_timeout_ms, flush
the access log and usage counts, exit 0.
[SEE ALSO]
.BR systemctl (1),
.BR systemd.exec (5),
/usr/share/doc/tollgate/configuration.md
]=])

file(MAKE_DIRECTORY ${WORK})
file(WRITE ${WORK}/tollgate.h2m "${include_text}")
set(page ${WORK}/tollgate.1)
execute_process(
  COMMAND ${HELP2MAN} --no-info
          "--name=rate-limiting gateway and decision service for HTTP APIs"
          "--version-string=${VERSION}" --section=1 --include=${WORK}/tollgate.h2m
          --output=${page} ${TOLLGATE}
  RESULT_VARIABLE rc ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "manpage.cmake: help2man failed (${rc}): ${err}")
endif()
execute_process(COMMAND ${GZIP} -9n -c ${page} OUTPUT_FILE ${OUT}.tmp RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "manpage.cmake: gzip failed (${rc})")
endif()
file(RENAME ${OUT}.tmp ${OUT})
