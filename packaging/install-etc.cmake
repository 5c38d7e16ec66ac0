# Install-time part of `cmake --install` and CPack (install(SCRIPT) in the top-level
# CMakeLists.txt): the example configuration and the systemd unit, whose places and paths depend
# on the prefix given at install time, not at configure time (CPack installs with the prefix
# /usr into a staging DESTDIR, whatever CMAKE_INSTALL_PREFIX the build was configured with).
#
#   prefix /usr (the .deb) or /:  /etc/tollgate/tollgate.yaml, the unit as written
#   prefix /opt/NAME:             /etc/opt/NAME/tollgate/tollgate.yaml (GNUInstallDirs' rule)
#   any other prefix P:           P/etc/tollgate/tollgate.yaml
# and the unit, in PREFIX/lib/systemd/system, naming PREFIX's binary and configuration.
#
# Set before it runs (install(CODE)): TOLLGATE_SOURCE_DIR, TOLLGATE_BINARY_DIR,
# TOLLGATE_INSTALL_BINDIR, TOLLGATE_INSTALL_DOCDIR, TOLLGATE_UNIT_DIR (relative or absolute).
#
# An existing configuration that differs from the example (a `cmake --install` over a live
# system) is kept; the example is installed beside it as tollgate.yaml.dist.

if(CMAKE_INSTALL_PREFIX STREQUAL "/usr" OR CMAKE_INSTALL_PREFIX STREQUAL "/")
  set(etc /etc)
elseif(CMAKE_INSTALL_PREFIX MATCHES "^/opt/")
  set(etc "/etc${CMAKE_INSTALL_PREFIX}")
else()
  set(etc "${CMAKE_INSTALL_PREFIX}/etc")
endif()

function(tollgate_full_path dir out_var)
  if(IS_ABSOLUTE "${dir}")
    set(${out_var} "${dir}" PARENT_SCOPE)
  else()
    set(${out_var} "${CMAKE_INSTALL_PREFIX}/${dir}" PARENT_SCOPE)
  endif()
endfunction()
tollgate_full_path("${TOLLGATE_INSTALL_BINDIR}" bindir)
tollgate_full_path("${TOLLGATE_INSTALL_DOCDIR}" docdir)
tollgate_full_path("${TOLLGATE_UNIT_DIR}" unitdir)
string(REGEX REPLACE "/+" "/" bindir "${bindir}")
string(REGEX REPLACE "/+" "/" docdir "${docdir}")
string(REGEX REPLACE "/+" "/" unitdir "${unitdir}")

# The configuration.
set(example "${TOLLGATE_SOURCE_DIR}/examples/tollgate.yaml")
set(config_dir "${etc}/tollgate")
set(installed "$ENV{DESTDIR}${config_dir}/tollgate.yaml")
set(config_name tollgate.yaml)
if(EXISTS "${installed}")
  file(SHA256 "${installed}" old)
  file(SHA256 "${example}" new)
  if(NOT old STREQUAL new)
    set(config_name tollgate.yaml.dist)
    message(STATUS "Keeping ${installed} (it differs from the example); "
                   "the example goes to ${config_name}")
  endif()
endif()
list(APPEND CMAKE_ABSOLUTE_DESTINATION_FILES "${config_dir}/${config_name}")
file(INSTALL DESTINATION "${config_dir}" TYPE FILE RENAME ${config_name}
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ FILES "${example}")

# The unit: written for /usr/bin and /etc (packaging/tollgate.service, what the .deb ships);
# other prefixes get their own paths.
file(READ "${TOLLGATE_SOURCE_DIR}/packaging/tollgate.service" unit)
string(REPLACE "/usr/bin/tollgate" "${bindir}/tollgate" unit "${unit}")
string(REPLACE "/etc/tollgate/" "${config_dir}/" unit "${unit}")
string(REPLACE "/usr/share/doc/tollgate/" "${docdir}/" unit "${unit}")
set(unit_out "${TOLLGATE_BINARY_DIR}/packaging/installed")
file(WRITE "${unit_out}/tollgate.service" "${unit}")
file(INSTALL DESTINATION "${unitdir}" TYPE FILE
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
     FILES "${unit_out}/tollgate.service")
