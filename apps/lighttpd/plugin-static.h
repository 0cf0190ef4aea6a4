/* The modules of the static lighttpd of apps/lighttpd (lighttpd's INSTALL,
 * "static build": one PLUGIN_INIT(mod_foo) for each module to be included).
 * CMake's BUILD_STATIC links every module's archive; those named here are
 * the ones server.modules may load. mod_indexfile, mod_dirlisting and
 * mod_staticfile are loaded by default. This file is on the compiler's
 * include path (recipe.toml), so lighttpd's tree is not touched. */
PLUGIN_INIT(mod_access)
PLUGIN_INIT(mod_alias)
PLUGIN_INIT(mod_rewrite)
PLUGIN_INIT(mod_redirect)
PLUGIN_INIT(mod_setenv)
PLUGIN_INIT(mod_expire)
PLUGIN_INIT(mod_auth)
PLUGIN_INIT(mod_authn_file)
PLUGIN_INIT(mod_deflate)
PLUGIN_INIT(mod_status)
PLUGIN_INIT(mod_accesslog)
PLUGIN_INIT(mod_indexfile)
PLUGIN_INIT(mod_dirlisting)
PLUGIN_INIT(mod_staticfile)
