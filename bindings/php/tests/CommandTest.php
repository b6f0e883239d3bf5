<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\Exception;
use Tokenlock\Tests\Support\TempDirTestCase;
use Tokenlock\Tests\Support\Tool;

use function Tokenlock\findCommand;
use function Tokenlock\increment;
use function Tokenlock\setCommand;
use function Tokenlock\writeFile;

/** Finding the tokenlock command, and what its failures become. */
final class CommandTest extends TempDirTestCase
{
    protected function tearDown(): void
    {
        setCommand(null);
        putenv('TOKENLOCK_COMMAND=' . Tool::path());
        parent::tearDown();
    }

    public function testAMissingCommandGivenAsOptionIsAClearErrorAndTouchesNothing(): void
    {
        $file = "$this->dir/hits.count";
        try {
            increment($file, ['command' => "$this->dir/bin/tokenlock"]);
            $this->fail('ran a command that does not exist');
        } catch (Exception $e) {
            $this->assertSame('command_not_found', $e->getError());
            $this->assertSame(127, $e->getCode());
            $this->assertStringContainsString("$this->dir/bin/tokenlock", $e->getMessage());
            $this->assertStringContainsString('does not exist', $e->getMessage());
        }
        $this->assertSame([], self::tree($this->dir));
    }

    public function testTokenlockCommandNamingAFileThatIsNotExecutableIsAClearError(): void
    {
        $fake = "$this->dir/tokenlock";
        file_put_contents($fake, "#!/bin/sh\n");
        chmod($fake, 0644);
        putenv("TOKENLOCK_COMMAND=$fake");
        try {
            findCommand();
            $this->fail('found a file that is not executable');
        } catch (Exception $e) {
            $this->assertSame('command_not_found', $e->getError());
            $this->assertStringContainsString("$fake (from TOKENLOCK_COMMAND) is not an executable file", $e->getMessage());
        }
        writeFile("$this->dir/out", "x\n");
        $this->assertSame("x\n", file_get_contents("$this->dir/out"), 'a write needs no command');
    }

    public function testSetCommandComesBeforeTheEnvironmentAndTheOptionBeforeBoth(): void
    {
        $other = "$this->dir/other";
        symlink(Tool::path(), $other);
        setCommand($other);
        $this->assertSame($other, findCommand());
        $this->assertSame(Tool::path(), findCommand(['command' => Tool::path()]));
        setCommand(null);
        $this->assertSame(Tool::path(), findCommand());
    }

    public function testTheCommandIsFoundBesideTheScriptThenInHomeBinThenOnPath(): void
    {
        mkdir("$this->dir/site");
        mkdir("$this->dir/home/bin", 0755, true);
        mkdir("$this->dir/pathbin");
        mkdir("$this->dir/empty");
        $script = "$this->dir/site/find.php";
        file_put_contents($script, '<?php require ' . var_export(TOKENLOCK_TEST_MODULE, true) . ";\n"
            . "try { echo Tokenlock\\findCommand(), ' ', Tokenlock\\increment(__DIR__ . '/n.count'); }\n"
            . "catch (Tokenlock\\Exception \$e) { echo \$e->getError(), ' ', \$e->getCode(), ' ', \$e->getMessage(); }\n");
        $env = ['HOME' => "$this->dir/empty", 'PATH' => '/usr/bin:/bin'];

        symlink(Tool::path(), "$this->dir/site/tokenlock");
        symlink(Tool::path(), "$this->dir/home/bin/tokenlock");
        symlink(Tool::path(), "$this->dir/pathbin/tokenlock");
        $this->assertSame("$this->dir/site/tokenlock 1", $this->runPhp($script, $env));

        unlink("$this->dir/site/tokenlock");
        $this->assertSame("$this->dir/home/bin/tokenlock 2", $this->runPhp($script, ['HOME' => "$this->dir/home"] + $env));

        $this->assertSame("$this->dir/pathbin/tokenlock 3", $this->runPhp($script, ['PATH' => "$this->dir/pathbin:/usr/bin"] + $env));

        $out = $this->runPhp($script, $env);
        $this->assertStringStartsWith('command_not_found 127 ', $out);
        $this->assertStringContainsString('TOKENLOCK_COMMAND', $out);
        $this->assertStringContainsString("beside the script in $this->dir/site", $out);
        $this->assertStringContainsString("$this->dir/empty/bin", $out);
        $this->assertStringContainsString('PATH (/usr/bin:/bin)', $out);
        $this->assertSame("3\n", file_get_contents("$this->dir/site/n.count"), 'the failed call changed nothing');
    }

    /** @return array<string, array{0: string, 1: string, 2: int, 3: string}> */
    public function exitStatuses(): array
    {
        return [
            'a named error' => ['echo "tokenlock: write /x: it is stale" >&2; echo \'{"error": "stale_data", "errno": 0, "message": "tokenlock: write /x: it is stale"}\' >&2; exit 75', 'stale_data', 75, 'tokenlock: write /x: it is stale'],
            'a system error' => ['echo "tokenlock: write /x: denied" >&2; echo \'{"error": "system", "errno": 13, "message": "tokenlock: write /x: denied"}\' >&2; exit 77', 'system', 77, 'tokenlock: write /x: denied'],
            'an older command, busy' => ['exit 1', 'timed_out', 1, 'exited with status 1'],
            'an older command, usage' => ['exit 64', 'bad_argument', 64, 'exited with status 64'],
            'an older command, lock lost' => ['exit 3', 'lock_lost', 3, 'exited with status 3'],
            'the message is never read' => ['echo "tokenlock: write /x: permission denied, timed out, overflow" >&2; exit 77', 'command_failed', 77, 'permission denied'],
            'unknown status' => ['exit 42', 'command_failed', 42, 'exited with status 42'],
            'killed by a signal' => ['kill -KILL $$', 'command_failed', 137, 'killed by signal 9'],
        ];
    }

    /** @dataProvider exitStatuses */
    public function testEachExitStatusBecomesItsErrorName(string $script, string $error, int $code, string $message): void
    {
        $fake = "$this->dir/fake-tokenlock";
        file_put_contents($fake, "#!/bin/sh\n$script\n");
        chmod($fake, 0755);
        try {
            writeFile("$this->dir/out", "x\n", ['command' => $fake]);
            $this->fail('a failing command was taken for success');
        } catch (Exception $e) {
            $this->assertSame($error, $e->getError());
            $this->assertSame($code, $e->getCode());
            $this->assertStringContainsString($message, $e->getMessage());
            $this->assertStringNotContainsString('{"error"', $e->getMessage());
            $this->assertSame($error === 'system' ? 13 : 0, $e->getErrno());
            $this->assertSame($fake, $e->getCommandLine()[0]);
            $this->assertSame('write', $e->getCommandLine()[1]);
        }
    }

    public function testArgumentsReachTheCommandUntouched(): void
    {
        // No shell: spaces, quotes, a leading dash and $ stay as they are.
        $name = "$this->dir/-a b'c\"\$HOME;*";
        writeFile($name, "x\n", ['sync' => 'none']);
        $this->assertSame("x\n", file_get_contents($name));
        $this->assertSame(1, increment("$name.count"));
        $this->assertFileExists("$name.count");
    }

    /** @return array<string, array{0: array<string, mixed>, 1: list<string>}> */
    public function waits(): array
    {
        return [
            'none: the command\'s 10 s' => [[], []],
            '0' => [['wait' => 0], ['--nonblock']],
            '0.3' => [['wait' => 0.3], ['--wait', '0.3']],
            'beyond 10 s' => [['wait' => 25], ['--wait', '25']],
            'null: a year, the longest' => [['wait' => null], ['--wait', '31536000']],
            'INF' => [['wait' => INF], ['--wait', '31536000']],
            'beyond a year' => [['wait' => 1e12], ['--wait', '31536000']],
        ];
    }

    /**
     * @dataProvider waits
     * @param array<string, mixed> $options
     * @param list<string> $expected
     */
    public function testTheWaitIsPassedAsTheCommandsOwnOptionToIncrAndWrite(array $options, array $expected): void
    {
        $fake = "$this->dir/fake-tokenlock";
        $log = "$this->dir/argv";
        file_put_contents($fake, "#!/bin/sh\nprintf '%s\\n' \"\$@\" >> '$log'\ncat >/dev/null\necho 1\n");
        chmod($fake, 0755);

        $this->assertSame(1, increment("$this->dir/c", $options + ['command' => $fake]));
        writeFile("$this->dir/f", "x\n", $options + ['lock' => "$this->dir/f.lock", 'command' => $fake]);
        $this->assertSame(
            array_merge(
                ['incr'], $expected, ['--', "$this->dir/c"],
                ['write', '--allow-empty', '--lock', "$this->dir/f.lock"], $expected, ['--', "$this->dir/f"]
            ),
            explode("\n", rtrim((string) file_get_contents($log), "\n")),
            'one command per call, and no acquire before it'
        );
    }

    public function testANegativeWaitIsRefusedBeforeAnythingRuns(): void
    {
        foreach ([fn () => increment("$this->dir/c", ['wait' => -1]), fn () => writeFile("$this->dir/f", "x\n", ['wait' => -0.5])] as $call) {
            try {
                $call();
                $this->fail('a negative wait was accepted');
            } catch (\InvalidArgumentException $e) {
                $this->assertStringContainsString('wait must be a number of seconds', $e->getMessage());
            }
        }
        $this->assertSame([], self::tree($this->dir));
    }

    /** @param array<string, string> $env */
    private function runPhp(string $script, array $env): string
    {
        $proc = proc_open([PHP_BINARY, $script], [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, null, $env);
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $this->assertSame(0, proc_close($proc), "php $script: $err");
        return (string) $out;
    }
}
