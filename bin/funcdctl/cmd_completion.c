/* completion bash|zsh: a script that completes commands, flags, kinds and
 * (asking the server with `funcdctl get KIND -o name`) object names. The
 * commands and their flags come from the dispatch table, so they cannot
 * drift from what funcdctl accepts. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* The flags a command's help lists: every word of letters and dashes
 * starting with '-' in the first column of a line that starts with "  -". */
static void print_flags(const char *help)
{
    for (const char *line = help; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > 3 && !strncmp(line, "  -", 3)) {
            const char *p = line + 2, *stop = line + len;
            const char *gap = strstr(p, "  ");
            if (gap && gap < stop)
                stop = gap;
            while (p < stop) {
                size_t w = strcspn(p, " ,");
                if (w > (size_t)(stop - p))
                    w = (size_t)(stop - p);
                if (w > 1 && p[0] == '-' && strspn(p, "-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") >= w)
                    printf(" %.*s", (int)w, p);
                p += w;
                while (p < stop && (*p == ' ' || *p == ','))
                    p++;
            }
        }
        line = end ? end + 1 : NULL;
    }
}

static void print_bash(void)
{
    size_t n;
    const ctl_command *cmds = ctl_commands(&n);
    fputs("# funcdctl completion for bash (source <(funcdctl completion bash))\n"
          "_funcdctl_flags() {\n"
          "    case $1 in\n",
          stdout);
    for (size_t i = 0; i < n; i++) {
        printf("        %s) echo", cmds[i].name);
        print_flags(cmds[i].help);
        fputs(" ;;\n", stdout);
    }
    fputs("    esac\n"
          "}\n"
          "_funcdctl() {\n"
          "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
          "    local cmd= kind= i w ns=()\n"
          "    for ((i = 1; i < COMP_CWORD; i++)); do\n"
          "        w=${COMP_WORDS[i]}\n"
          "        case $w in\n"
          "        -n|--namespace) ns=(-n \"${COMP_WORDS[i+1]}\"); ((i++)) ;;\n"
          "        -o|--output|--server|--token|-f|--filename|-l|--selector) ((i++)) ;;\n"
          "        -*) ;;\n"
          "        *) if [ -z \"$cmd\" ]; then cmd=$w; elif [ -z \"$kind\" ]; then kind=$w; fi ;;\n"
          "        esac\n"
          "    done\n"
          "    case $prev in\n"
          "    -o|--output) COMPREPLY=($(compgen -W 'table wide json yaml name' -- \"$cur\")); return ;;\n"
          "    -n|--namespace|--server|--token|-l|--selector) return ;;\n"
          "    -f|--filename|--from-file|-d|--data) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n"
          "    esac\n"
          "    if [ -z \"$cmd\" ]; then\n"
          "        COMPREPLY=($(compgen -W '",
          stdout);
    for (size_t i = 0; i < n; i++)
        printf("%s%s", i ? " " : "", cmds[i].name);
    fputs(" --server --token --namespace --output --help --version' -- \"$cur\"))\n"
          "        return\n"
          "    fi\n"
          "    if [[ $cur == -* ]]; then\n"
          "        COMPREPLY=($(compgen -W \"$(_funcdctl_flags \"$cmd\") --namespace --output "
          "--help\" -- \"$cur\"))\n"
          "        return\n"
          "    fi\n"
          "    local kinds='",
          stdout);
    for (size_t i = 0; funcd_kinds[i]; i++) {
        printf("%s%s %s", i ? " " : "", funcd_kinds[i]->singular, funcd_kinds[i]->plural);
        if (funcd_kinds[i]->short_name)
            printf(" %s", funcd_kinds[i]->short_name);
    }
    fputs("'\n"
          "    case $cmd in\n"
          "    get|delete|describe)\n"
          "        if [ -z \"$kind\" ]; then\n"
          "            COMPREPLY=($(compgen -W \"$kinds images nodes\" -- \"$cur\"))\n"
          "        else\n"
          "            COMPREPLY=($(compgen -W \"$(funcdctl \"${ns[@]}\" get \"$kind\" -o name "
          "2>/dev/null | sed 's|.*/||')\" -- \"$cur\"))\n"
          "        fi ;;\n"
          "    watch) [ -z \"$kind\" ] && COMPREPLY=($(compgen -W \"$kinds\" -- \"$cur\")) ;;\n"
          "    invoke|logs|scale)\n"
          "        [ -z \"$kind\" ] && COMPREPLY=($(compgen -W \"$(funcdctl \"${ns[@]}\" get "
          "functions -o name 2>/dev/null | sed 's|.*/||')\" -- \"$cur\")) ;;\n"
          "    deploy) COMPREPLY=($(compgen -d -- \"$cur\")) ;;\n"
          "    fn) [ -z \"$kind\" ] && COMPREPLY=($(compgen -W eval -- \"$cur\")) ;;\n"
          "    create) COMPREPLY=($(compgen -W 'secret generic' -- \"$cur\")) ;;\n"
          "    completion) COMPREPLY=($(compgen -W 'bash zsh' -- \"$cur\")) ;;\n"
          "    esac\n"
          "}\n"
          "complete -F _funcdctl funcdctl\n",
          stdout);
}

int cmd_completion(ctl_ctx *ctx, int argc, char **argv)
{
    if (argc != 1)
        return ctl_usage(ctx, "completion needs the shell: bash or zsh");
    if (!strcmp(argv[0], "bash")) {
        print_bash();
    } else if (!strcmp(argv[0], "zsh")) {
        /* zsh runs bash completion functions through bashcompinit. */
        fputs("#compdef funcdctl\n"
              "autoload -U +X bashcompinit && bashcompinit\n",
              stdout);
        print_bash();
    } else {
        return ctl_usage(ctx, "completion knows bash and zsh, not \"%s\"", argv[0]);
    }
    return 0;
}
