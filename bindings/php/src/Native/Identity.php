<?php

declare(strict_types=1);

namespace Tokenlock\Native;

/**
 * Who this process is, as the library writes it into a token: pid,
 * start time and host tag (posix_os.cpp), and whether /proc lets
 * another process's life be seen.
 *
 * @internal
 */
trait Identity
{
    /**
     * Read once per process (a forked child reads it again), which under
     * php-fpm, where statics last one request, is once per request.
     *
     * @var array{pid: int, start: string, tag: string, proc: bool, owner: string}|null
     */
    private static ?array $identity = null;

    /**
     * Random bytes read a block at a time for the tokens' nonces (one
     * getrandom(2) per 32 tokens instead of one per token), with the pid
     * that read them: a forked child must not reuse its parent's.
     */
    private static string $nonces = '';
    private static int $nonceAt = 0;
    private static int $noncePid = 0;

    private static bool $noticeGiven = false;

    private static ?bool $hidepid = null;

    public static function pid(): int
    {
        return function_exists('posix_getpid') ? posix_getpid() : getmypid();
    }

    /**
     * The pid identity() last read, which made the last token: right after
     * a call that made one it is this process's, without a system call.
     */
    public static function tokenPid(): int
    {
        return self::$identity['pid'] ?? self::pid();
    }

    /**
     * pid, start time and host tag, as posix_os.cpp makes them; read again
     * in a forked child, whose pid differs.
     *
     * `owner` is the token's fixed part: "TAG.PID.START.".
     *
     * @return array{pid: int, start: string, tag: string, proc: bool, owner: string}
     */
    public static function identity(): array
    {
        $pid = self::pid();
        if (self::$identity !== null && self::$identity['pid'] === $pid) {
            return self::$identity;
        }
        $stat = self::procStat($pid);
        $proc = $stat !== null;
        $name = (string) gethostname();
        // Without ctype, which PHP may be built without.
        $host = (string) preg_replace('/[^A-Za-z0-9-]/', '_', substr($name, 0, 32));
        if ($host === '') {
            $host = 'host';
        }
        if ($proc) {
            $boot = @file_get_contents('/proc/sys/kernel/random/boot_id');
            $boot = $boot === false ? '' : strtok($boot, "\n");
            $ns = @readlink('/proc/self/ns/pid');
            [$hi, $lo] = self::fnv1a($host, self::fnv1a($ns === false ? '' : $ns, self::fnv1a($boot === false ? '' : $boot)));
            $tag = sprintf('%s-%08x', $host, $hi ^ $lo);
        } else {
            // Without /proc this process cannot tell its boot or pid
            // namespace apart, so its tag must never equal a tag of one
            // that can: owners are then judged by their lease only.
            $tag = sprintf('%s-%s', $host, bin2hex(random_bytes(4)));
            self::notice();
        }
        $start = $proc ? $stat[1] : '0';
        return self::$identity = ['pid' => $pid, 'start' => $start, 'tag' => $tag, 'proc' => $proc, 'owner' => "$tag.$pid.$start."];
    }

    /** 16 hex digits of fresh randomness for a token of process PID. */
    public static function nonce(int $pid): string
    {
        if (self::$noncePid !== $pid || self::$nonceAt >= strlen(self::$nonces)) {
            self::$nonces = bin2hex(random_bytes(256));
            self::$nonceAt = 0;
            self::$noncePid = $pid;
        }
        self::$nonceAt += 16;
        return substr(self::$nonces, self::$nonceAt - 16, 16);
    }

    private static function notice(): void
    {
        if (self::$noticeGiven) {
            return;
        }
        self::$noticeGiven = true;
        $why = ini_get('open_basedir') ? 'open_basedir (' . ini_get('open_basedir') . ') excludes it' : 'it is not mounted or not readable';
        trigger_error("Tokenlock: /proc cannot be read ($why): a lock whose owner died is taken over only when its lease ends; add /proc to open_basedir to have dead owners detected at once", E_USER_NOTICE);
    }

    /**
     * FNV-1a, 64 bits, in two 32-bit halves: PHP's integers overflow to
     * floats instead of wrapping.
     *
     * @param array{0: int, 1: int} $h
     * @return array{0: int, 1: int}
     */
    public static function fnv1a(string $s, array $h = [0xcbf29ce4, 0x84222325]): array
    {
        [$hi, $lo] = $h;
        for ($i = 0, $n = strlen($s); $i < $n; ++$i) {
            $lo ^= ord($s[$i]);
            // prime = 2^40 + 0x1b3
            $l = $lo * 0x1b3;
            $hi = ($hi * 0x1b3 + ($l >> 32) + ($lo << 8)) & 0xffffffff;
            $lo = $l & 0xffffffff;
        }
        return [$hi, $lo];
    }

    /**
     * State and start time (field 22) of /proc/PID/stat, or null when it
     * cannot be read.
     *
     * @return array{0: string, 1: string}|null
     */
    public static function procStat(int $pid): ?array
    {
        $text = @file_get_contents("/proc/$pid/stat");
        if ($text === false || $text === '') {
            return null;
        }
        // comm may hold spaces and parentheses: count from the last ')'.
        $close = strrpos($text, ')');
        if ($close === false) {
            return null;
        }
        $fields = preg_split('/ +/', trim(substr($text, $close + 1)));
        if (count($fields) < 20 || !preg_match('/\A[0-9]+\z/', $fields[19])) {
            return null;
        }
        return [$fields[0][0], $fields[19]];
    }

    /**
     * The wall clock in microseconds: microtime(true) is a double, within a
     * microsecond of it, more than a lease needs (judged with a second's skew).
     */
    public static function nowUs(): int
    {
        return (int) round(microtime(true) * 1000000);
    }

    private static function hidepid(): bool
    {
        if (self::$hidepid === null) {
            $mounts = (string) @file_get_contents('/proc/self/mounts');
            self::$hidepid = $mounts === '' || (bool) preg_match('/^\S+ \/proc proc \S*hidepid=(?!0[ ,]|off[ ,])/m', $mounts);
        }
        return self::$hidepid;
    }
}
